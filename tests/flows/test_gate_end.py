"""A gate's end reaches the drive loop one way, once: through its box
(``SpecBox.end``), whoever tells first (the task as its verdict is kept,
Prefect's end of the task run, the loop for a task it never ran)."""

from __future__ import annotations

import pickle
import queue
import threading

from milepost.flows.gate_task import GateSpec, SpecBox
from milepost.graph.models import GateCommand, Milestone
from milepost.results import Claim


def _box(on_end: object) -> SpecBox:
    m = Milestone(id=1, name="a", gate=[GateCommand(run="true")])
    claim = Claim(item=1, pk=1, milestone=m, attempt=1, owner="o", log_path="/tmp/attempt-1.log")
    spec = GateSpec(claim=claim, commands=m.gate, cwd="/tmp", env={}, log_path=claim.log_path, stop_file="/tmp/s")
    return SpecBox(spec, on_end=on_end)  # type: ignore[arg-type]


def test_the_end_is_told_once_whoever_tells_it() -> None:
    told: queue.Queue[str] = queue.Queue()
    box = _box(lambda: told.put("a#1:gate"))
    start = threading.Barrier(8)

    def tell() -> None:
        start.wait()
        box.end()

    threads = [threading.Thread(target=tell) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    box.end()
    assert told.qsize() == 1


def test_a_box_pickled_to_a_worker_tells_nothing() -> None:
    """On a Dask worker only the spec travels: the end reaches the loop from
    Prefect's end of the task run, in the driver's process."""
    told: list[str] = []
    box = _box(lambda: told.append("end"))
    there = pickle.loads(pickle.dumps(box))
    there.end()
    assert told == [] and there.spec == box.spec
    box.end()
    assert told == ["end"]

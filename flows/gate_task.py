"""The gate task: one gate (or fix) attempt as a Prefect task, in the
driver's process or on a Dask worker. Everything it needs travels in a
picklable :class:`GateSpec`; its result goes to a JSON file beside the
attempt's log (not through Prefect's result machinery), and its final state
is named for what it means to the milestone (Needs fix, Stuck, Interrupted).
"""

from __future__ import annotations

import os
import threading
from enum import StrEnum
from pathlib import Path
from typing import Any

from prefect import get_run_logger, task
from prefect.cache_policies import NO_CACHE
from prefect.client.schemas.objects import State
from prefect.states import Cancelled, Completed, Failed
from pydantic import BaseModel, Field

from milepost.gates._supervisor_main import process_start
from milepost.gates.command import GateResult, Outcome, attempt_files, run_gate, write_result
from milepost.gates.supervisor import host_identity
from milepost.graph.models import GateCommand
from milepost.results import Claim

__all__ = ["GateSpec", "TaskKind", "driver_identity", "gate_task", "run_gate_spec"]

# Gate output forwarded to the Prefect task-run log (the UI); the whole output
# stays in the log file.
MAX_LOG_LINES = 2000
# A line forwarded is cut here, and output without line ends is forwarded in
# pieces of this size: the driver never holds more than a chunk of a log.
MAX_LINE_BYTES = 4096
STOP_POLL_SECONDS = 0.2


class TaskKind(StrEnum):
    """What a task of the drive runs: a milestone's gate, or the fix hook after a failed attempt."""

    GATE = "gate"
    FIX = "fix"


class GateSpec(BaseModel):
    """Everything one gate (or fix) task needs; pickled to Dask workers."""

    claim: Claim
    kind: TaskKind = TaskKind.GATE
    commands: list[GateCommand]
    cwd: str
    env: dict[str, str]
    timeout: float | None = None
    log_path: str
    stop_file: str
    # The driver process (host, boot, pid, start): a gate task in another
    # process (a Dask worker) stops its gate when that process is gone.
    driver: dict[str, Any] = Field(default_factory=dict)
    # Input patterns (relative to ``cwd``, the workspace root): the attempt's fingerprint.
    inputs: list[str] = Field(default_factory=list)
    # A passed run with the same fingerprint stands in: the driver wrote the
    # result file already, the task runs nothing (it is the run's node in the UI).
    cached: bool = False

    @property
    def result_file(self) -> Path:
        return attempt_files(Path(self.log_path))[1]


def driver_identity() -> dict[str, Any]:
    pid = os.getpid()
    return {**host_identity(), "pid": pid, "start": process_start(pid)}


def _driver_gone(driver: dict[str, Any]) -> bool:
    """Whether the driver that submitted a gate task has died. Known only on
    its own machine; a task in the driver's own process never asks."""
    pid = driver.get("pid")
    if not isinstance(pid, int) or pid == os.getpid() or driver.get("boot") != host_identity()["boot"]:
        return False
    start = process_start(pid)
    return start is None or (driver.get("start") is not None and start != driver["start"])


def _follow_log(logger: Any, path: Path, done: threading.Event, limit: int) -> None:
    """Forward the log file's lines to the task-run logger as they are written."""
    sent = 0
    pos = 0
    buf = b""
    while True:
        finished = done.is_set()
        try:
            with open(path, "rb") as f:
                f.seek(pos)
                chunk = f.read(1 << 16)
                pos += len(chunk)
        except FileNotFoundError:
            chunk = b""
        buf += chunk
        *lines, buf = buf.split(b"\n")
        if len(buf) > MAX_LINE_BYTES:
            lines.append(buf)
            buf = b""
        for line in lines:
            if sent < limit:
                logger.info(line[:MAX_LINE_BYTES].decode("utf-8", errors="replace"))
            sent += 1
        if finished and not chunk:
            if buf and sent < limit:
                logger.info(buf.decode("utf-8", errors="replace"))
            if sent > limit:
                logger.warning(f"{sent - limit} more lines not forwarded; the whole output is in {path}")
            return
        if not chunk:
            done.wait(0.2)


def run_gate_spec(spec: GateSpec) -> State[Any]:
    """The body of :data:`gate_task`: run one gate (or fix) attempt and end
    in a state that says how it went (see :func:`_task_state`). (A plain
    module-level function, so Dask can pickle the task by reference.)"""
    log_path = Path(spec.log_path)
    if spec.cached:
        return _task_state(spec, GateResult.model_validate_json(spec.result_file.read_text()))
    finished = threading.Event()
    stopped = threading.Event()

    def watchdog() -> None:
        while not finished.wait(STOP_POLL_SECONDS):
            if os.path.exists(spec.stop_file) or _driver_gone(spec.driver):
                stopped.set()  # run_gate stops the running command's whole group
                return

    # The run logger is bound to this task run's context: take it here, use it in the thread.
    logger = get_run_logger()
    follower = threading.Thread(target=_follow_log, args=(logger, log_path, finished, MAX_LOG_LINES), daemon=True)
    guard = threading.Thread(target=watchdog, daemon=True)
    follower.start()
    guard.start()
    try:
        result = run_gate(
            spec.commands,
            log_path,
            default_cwd=Path(spec.cwd),
            env=spec.env,
            default_timeout=spec.timeout,
            stop=stopped,
            inputs=spec.inputs,
            root=Path(spec.cwd),
        )
    finally:
        finished.set()
        follower.join(timeout=10)
        guard.join(timeout=5)
    if stopped.is_set() and not result.passed:
        result = result.model_copy(update={"outcome": Outcome.INTERRUPTED, "reason": "interrupted: the drive stopped"})
        write_result(log_path, result)
    return _task_state(spec, result)


def _task_state(spec: GateSpec, result: GateResult) -> State[Any]:
    """The gate task run's final state, named for what it means to the
    milestone (the UI shows the name): a failure that spends the last of the
    budget reads ``Stuck``, an earlier one ``Needs fix``; an interrupted
    attempt is ``Interrupted`` (cancelled), not a failure of the work."""
    m = spec.claim.milestone
    kind = "re-proof" if spec.claim.reproof and spec.kind is TaskKind.GATE else spec.kind.value
    what = f"{kind} of {m.name!r} (attempt {spec.claim.attempt}): {result.reason}"
    if result.outcome is Outcome.CACHED:
        return Completed(name="Cached", message=what)
    if result.passed:
        return Completed(message=what)
    if result.outcome is Outcome.INTERRUPTED:
        return Cancelled(name="Interrupted", message=what)
    if spec.kind is not TaskKind.GATE:
        return Failed(name="Fix failed", message=what)
    last = m.attempts + 1 >= m.max_attempts
    name = "Stuck" if last else ("Re-proof failed" if spec.claim.reproof else "Needs fix")
    return Failed(name=name, message=what + ("; retry budget spent" if last else ""))


gate_task = task(name="gate", cache_policy=NO_CACHE, persist_result=False, log_prints=False)(run_gate_spec)

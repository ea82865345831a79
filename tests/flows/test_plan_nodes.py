"""Where plan nodes sit on the flow-run graph's time axis (the Prefect UI
places task runs by start time): a column per level of the DAG, in order,
never a pile at one instant. The UI itself is checked in test_ui.py."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from milepost.flows.plan_nodes import MIN_STEP, node_times
from milepost.graph import Milestone

T0 = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)


def chain_and_fan() -> list[Milestone]:
    """merge <- (test-a, test-b) <- docs <- ship, and a lone 'lint': dependency order."""
    names = [
        ("merge", []),
        ("lint", []),
        ("test-a", ["merge"]),
        ("test-b", ["merge"]),
        ("docs", ["test-a", "test-b"]),
        ("ship", ["docs"]),
    ]
    return [Milestone(id=i + 1, name=n, deps=d) for i, (n, d) in enumerate(names)]


def test_the_last_nodes_come_after_now_a_column_per_level() -> None:
    now = T0 + timedelta(seconds=10)
    times = node_times(chain_and_fan(), T0, only_done=False, now=now)
    starts = {n: s for n, (s, _) in times.items()}
    assert starts["merge"] == starts["lint"] == now  # level 1: after every gate of the drive
    assert starts["merge"] < starts["test-a"] == starts["test-b"] < starts["docs"] < starts["ship"]
    step = starts["test-a"] - starts["merge"]
    # 8% of the run so far (room for a label at the UI's scale), here 7.5%: four levels share 30% of it.
    assert step == timedelta(seconds=0.75)
    assert all(start < end <= start + step / 2 for start, end in times.values())  # every bar ends, short
    # The tail is at most 30% of the run, however deep the plan.
    deep = [Milestone(id=i + 1, name=f"m{i}", deps=[f"m{i - 1}"] if i else []) for i in range(40)]
    deep_times = node_times(deep, T0, only_done=False, now=now)
    assert max(start for start, _ in deep_times.values()) - now < timedelta(seconds=3)
    assert len({s for s, _ in deep_times.values()}) == 40


def test_the_nodes_done_before_share_out_the_runs_first_moments() -> None:
    now = T0 + timedelta(seconds=1)
    times = node_times(chain_and_fan(), T0, only_done=True, now=now)
    assert all(T0 < s < e < now for s, e in times.values())  # before any gate of the drive starts
    assert times["merge"][0] < times["test-a"][0] < times["docs"][0] < times["ship"][0]
    # A run that started "now" (or a server that has no start time yet) still gets ordered, ending bars.
    late = node_times(chain_and_fan(), None, only_done=False, now=now)
    assert late["ship"][0] - late["docs"][0] == MIN_STEP

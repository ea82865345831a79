"""How long each milestone's gate took the last time it ran to a verdict:
the weights of the critical path in ``graph`` and the pictures."""

from __future__ import annotations

from sqlalchemy import select

from milepost.gates.outcome import Outcome
from milepost.retry import retried
from milepost.service._rows import MILESTONES, RUNS
from milepost.service._tx import Context
from milepost.service.items import resolve

__all__ = ["gate_time", "last_durations"]

# Runs that ran to a verdict; an interrupted run's time says nothing of the gate.
_JUDGED = (Outcome.PASSED.value, Outcome.FAILED.value)


@retried
def last_durations(ctx: Context, item: int | None = None) -> dict[str, float]:
    """Seconds of each milestone's last passed or failed gate run (milestones
    that never ran one are left out)."""
    item_id = resolve(ctx, item)
    with ctx.store.read() as conn:
        rows = conn.execute(
            select(MILESTONES.c.name, RUNS.c.duration)
            .join(RUNS, RUNS.c.milestone_id == MILESTONES.c.id)
            .where(RUNS.c.item_id == item_id, RUNS.c.outcome.in_(_JUDGED))
            .order_by(RUNS.c.milestone_id, RUNS.c.attempt)
        )
        return {name: float(duration) for name, duration in rows}  # the last attempt wins


@retried
def gate_time(ctx: Context, item: int) -> dict[str, tuple[float, int]]:
    """Per milestone: the seconds of all its gate runs, and its last attempt's number."""
    from sqlalchemy import func

    with ctx.store.read() as conn:
        rows = conn.execute(
            select(MILESTONES.c.name, func.sum(RUNS.c.duration), func.max(RUNS.c.attempt))
            .join(RUNS, RUNS.c.milestone_id == MILESTONES.c.id)
            .where(RUNS.c.item_id == item)
            .group_by(MILESTONES.c.name)
        )
        return {name: (float(total or 0.0), int(last or 0)) for name, total, last in rows}

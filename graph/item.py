"""Work-item rules that need no I/O: an open item, waits and the derived
readiness of an item.

Readiness is derived, never stored, in this precedence (first match wins):

1. the item is completed or cancelled;
2. an active wait (by kind: task_result > operator_input > timer > external > system);
3. ``blocked_by`` (a blocker someone recorded);
4. ``after``: another work item it waits for is not completed yet;
5. ``plan_status`` needs_input (the operator must answer);
6. the milestone DAG: runnable when a milestone is ready, one is in progress,
   or all are done and the item awaits its report; waiting for an operator
   when a milestone waits for review and nothing else can move; blocked when
   milestones are stuck (or held: locked, unconfirmed) and nothing can move.

Each answer carries the coarse readiness, a fine state and a reason.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from milepost.graph.dag import WorkGraph
from milepost.graph.errors import InvalidValueError, TransitionError
from milepost.graph.models import Wait, WorkItem, check_text
from milepost.graph.status import (
    ItemState,
    MilestoneStatus,
    PlanStatus,
    Readiness,
    ReadinessState,
    TodoState,
    WaitKind,
)

__all__ = [
    "WAIT_PRECEDENCE",
    "WAIT_READINESS",
    "Readiness",
    "ReadinessView",
    "TodoState",
    "WaitKind",
    "check_open",
    "make_wait",
    "readiness_view",
]

RS = ReadinessState

# Which wait speaks first when several are active, and what each means.
WAIT_PRECEDENCE = (WaitKind.TASK_RESULT, WaitKind.OPERATOR_INPUT, WaitKind.TIMER, WaitKind.EXTERNAL, WaitKind.SYSTEM)
WAIT_READINESS = {
    WaitKind.TASK_RESULT: Readiness.BLOCKED,
    WaitKind.OPERATOR_INPUT: Readiness.WAITING_FOR_OPERATOR,
    WaitKind.TIMER: Readiness.BLOCKED,
    WaitKind.EXTERNAL: Readiness.BLOCKED,
    WaitKind.SYSTEM: Readiness.BLOCKED,
}


@dataclass(frozen=True)
class ReadinessView:
    readiness: Readiness
    state: ReadinessState  # the fine state: which wait, which blocker, what the DAG says
    reason: str


def check_open(item_id: int, state: ItemState) -> None:
    """Only an open item changes."""
    if state is not ItemState.OPEN:
        raise TransitionError(
            f"work item {item_id} is {state.value}: it cannot change any more", item=item_id, state=state.value
        )


def make_wait(kind: str, reason: str, resource: str | None, deadline: datetime | None, now: datetime) -> Wait:
    """Validate a wait: a reason always; task_result needs a resource, timer a
    deadline (with a zone), external a resource to be woken by."""
    try:
        k = WaitKind(kind)
    except ValueError:
        allowed = ", ".join(w.value for w in WaitKind)
        raise InvalidValueError(f"unknown wait kind {kind!r}: use one of {allowed}") from None
    a = "an" if k.value[0] in "aeiou" else "a"
    check_text(reason, "the wait's reason")
    if resource is not None:
        check_text(resource, "the wait's resource")
    if not reason.strip():
        raise InvalidValueError(f"{a} {k.value} wait needs a reason: pass --reason TEXT")
    if k in (WaitKind.TASK_RESULT, WaitKind.EXTERNAL) and not resource:
        raise InvalidValueError(f"{a} {k.value} wait needs --resource (the task id or outside object it waits on)")
    if k is WaitKind.TIMER:
        if deadline is None:
            raise InvalidValueError("a timer wait needs --until TIME (ISO 8601 with a zone, e.g. 2026-12-01T09:00:00Z)")
        if deadline.tzinfo is None:
            raise InvalidValueError(f"--until {deadline.isoformat()} has no zone: add one, e.g. Z or +01:00")
    return Wait(kind=k, resource=resource, reason=reason.strip(), deadline=deadline, since=now)


def readiness_view(item: WorkItem, g: WorkGraph, *, after_open: bool = False) -> ReadinessView:
    """Derive readiness (see the module docstring for the precedence).
    ``after_open``: the item named in ``item.after`` is not completed yet."""
    held = _item_readiness(item, after_open=after_open)
    if held is not None:
        return held
    return _graph_readiness(g)


def _item_readiness(item: WorkItem, *, after_open: bool) -> ReadinessView | None:
    """The readiness the item's own fields decide (its state, waits, block, after, plan), or None."""
    if item.state is ItemState.COMPLETED:
        return ReadinessView(Readiness.COMPLETED, RS.COMPLETED, "completed with a report")
    if item.state is ItemState.CANCELLED:
        return ReadinessView(Readiness.CANCELLED, RS.CANCELLED, item.cancel_reason or "cancelled")
    waits = sorted(item.waits, key=lambda w: WAIT_PRECEDENCE.index(w.kind))
    if waits:
        w = waits[0]
        on = f" {w.resource}" if w.resource else ""
        until = f" until {w.deadline.isoformat()}" if w.deadline else ""
        why = f"{w.kind.value}{on}{until}: {w.reason}"
        return ReadinessView(WAIT_READINESS[w.kind], RS(f"waiting_{w.kind.value}"), why)
    if item.blocked_by:
        return ReadinessView(Readiness.BLOCKED, RS.BLOCKED_BY, item.blocked_by)
    if item.after is not None and after_open:
        return ReadinessView(Readiness.BLOCKED, RS.AFTER_ITEM, f"waits for work item {item.after} to complete")
    if item.plan_status is PlanStatus.NEEDS_INPUT:
        return ReadinessView(Readiness.WAITING_FOR_OPERATOR, RS.NEEDS_INPUT, "the plan needs operator input")
    return None


def _graph_readiness(g: WorkGraph) -> ReadinessView:
    """The readiness the item's milestones decide: planning, a ready one, all done, in progress or held."""
    if not len(g):
        return ReadinessView(Readiness.RUNNABLE, RS.PLANNING, "no milestones yet: plan them")
    nxt = g.next_ready()
    if nxt is not None:
        return ReadinessView(Readiness.RUNNABLE, RS.MILESTONE_READY, f"next: {nxt.name}")
    if g.all_done():
        return _all_done_readiness(g)
    active = [m.name for m in g if m.status is MilestoneStatus.IN_PROGRESS and not m.awaiting_review]
    if active:
        return ReadinessView(Readiness.RUNNABLE, RS.IN_PROGRESS, "in progress: " + ", ".join(active))
    review = [m.name for m in g if m.awaiting_review]
    stuck = [m.name for m in g if m.is_stuck]
    if review and not stuck:
        return ReadinessView(Readiness.WAITING_FOR_OPERATOR, RS.REVIEW, "waiting for review: " + ", ".join(review))
    if stuck:
        return ReadinessView(Readiness.BLOCKED, RS.STUCK, "stuck: " + ", ".join(stuck))
    return ReadinessView(Readiness.BLOCKED, RS.HELD, g.why_nothing_ready())


def _all_done_readiness(g: WorkGraph) -> ReadinessView:
    """Every milestone is done: re-prove the stale ones, else complete the item with a report."""
    stale = g.stale()
    if stale:
        listed = ", ".join(stale[:5]) + (f" and {len(stale) - 5} more" if len(stale) > 5 else "")
        return ReadinessView(
            Readiness.RUNNABLE, RS.STALE, f"every milestone is done, but stale: {listed}; re-prove them (verify)"
        )
    return ReadinessView(Readiness.RUNNABLE, RS.AWAITING_REPORT, "every milestone is done: complete it with a report")

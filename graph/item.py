"""Work-item rules that need no I/O: structure freeze and derived readiness."""

from __future__ import annotations

from enum import StrEnum

from milepost.errors import FrozenPlanError, TransitionError
from milepost.graph.dag import WorkGraph
from milepost.graph.models import WorkItem
from milepost.graph.status import ItemState, MilestoneStatus, PlanStatus

__all__ = ["Readiness", "check_open", "check_structure_editable", "readiness"]


class Readiness(StrEnum):
    """Coarse readiness of a work item; derived, never stored."""

    RUNNABLE = "runnable"
    WAITING_FOR_OPERATOR = "waiting_for_operator"
    BLOCKED = "blocked"
    COMPLETED = "completed"
    CANCELLED = "cancelled"


def check_open(item: WorkItem) -> None:
    if item.state is not ItemState.OPEN:
        raise TransitionError(
            f"work item {item.id} is {item.state.value}: it cannot change any more",
            item=item.id,
            state=item.state.value,
        )


def check_structure_editable(item: WorkItem, what: str) -> None:
    """Milestones are added or removed only while the plan is a draft."""
    check_open(item)
    if item.plan_status is not PlanStatus.DRAFT:
        raise FrozenPlanError(
            f"cannot {what}: work item {item.id} plan_status is {item.plan_status.value}, structure is frozen;"
            f" allowed only in draft (milepost item update {item.id} --plan-status draft)",
            item=item.id,
            plan_status=item.plan_status.value,
        )


def readiness(item: WorkItem, g: WorkGraph) -> Readiness:
    if item.state is ItemState.COMPLETED:
        return Readiness.COMPLETED
    if item.state is ItemState.CANCELLED:
        return Readiness.CANCELLED
    if item.plan_status is PlanStatus.NEEDS_INPUT:
        return Readiness.WAITING_FOR_OPERATOR
    if g.next_ready() is not None or g.all_done():
        return Readiness.RUNNABLE
    if any(m.status is MilestoneStatus.IN_PROGRESS and not m.awaiting_review for m in g):
        return Readiness.RUNNABLE
    if any(m.awaiting_review for m in g):
        return Readiness.WAITING_FOR_OPERATOR
    return Readiness.BLOCKED

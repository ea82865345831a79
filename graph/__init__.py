"""The pure domain of milepost: milestones, the DAG, work items, transition
tables, readiness and plan models. No I/O; depends on pydantic and networkx."""

from milepost.graph.dag import Change, NextPick, WorkGraph, validate_milestones
from milepost.graph.item import (
    Readiness,
    ReadinessView,
    TodoState,
    WaitKind,
    check_open,
    check_structure_editable,
    readiness,
    readiness_view,
)
from milepost.graph.models import (
    DEFAULT_RETRIES,
    GateCommand,
    ItemDefaults,
    Milestone,
    TodoItem,
    Wait,
    WorkItem,
    check_name,
)
from milepost.graph.plan import Plan, PlanCommand, PlanDefaults, PlanMilestone, plan_from_item
from milepost.graph.status import (
    TRANSITIONS,
    Action,
    ItemState,
    MilestoneStatus,
    PlanStatus,
    allowed_actions,
    transition,
)

__all__ = [
    "DEFAULT_RETRIES",
    "TRANSITIONS",
    "Action",
    "Change",
    "GateCommand",
    "ItemDefaults",
    "ItemState",
    "Milestone",
    "MilestoneStatus",
    "NextPick",
    "Plan",
    "PlanCommand",
    "PlanDefaults",
    "PlanMilestone",
    "PlanStatus",
    "Readiness",
    "ReadinessView",
    "TodoItem",
    "TodoState",
    "Wait",
    "WaitKind",
    "WorkGraph",
    "WorkItem",
    "allowed_actions",
    "check_name",
    "check_open",
    "check_structure_editable",
    "plan_from_item",
    "readiness",
    "readiness_view",
    "transition",
    "validate_milestones",
]

"""The pure domain of milepost: milestones, the DAG, work items, transition
tables, readiness and plan models. No I/O; depends on pydantic and networkx.

Names load on first use: a command that needs the statuses does not build
the plan-file models."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from milepost.graph.dag import Change, NextPick, WorkGraph, display_status
    from milepost.graph.item import ReadinessView, check_open, readiness_view
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
        ArtifactStatus,
        DisplayStatus,
        ItemFilter,
        ItemState,
        MilestoneStatus,
        PlanStatus,
        Readiness,
        ReadinessState,
        TodoState,
        WaitKind,
        allowed_actions,
        retry_at,
        transition,
    )
    from milepost.graph.validate import validate_milestones

__all__ = [
    "DEFAULT_RETRIES",
    "TRANSITIONS",
    "Action",
    "ArtifactStatus",
    "Change",
    "DisplayStatus",
    "GateCommand",
    "ItemDefaults",
    "ItemFilter",
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
    "ReadinessState",
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
    "display_status",
    "plan_from_item",
    "readiness_view",
    "retry_at",
    "transition",
    "validate_milestones",
]

_LAZY = {
    "Change": "milepost.graph.dag",
    "NextPick": "milepost.graph.dag",
    "WorkGraph": "milepost.graph.dag",
    "display_status": "milepost.graph.dag",
    "validate_milestones": "milepost.graph.validate",
    "ReadinessView": "milepost.graph.item",
    "check_open": "milepost.graph.item",
    "readiness_view": "milepost.graph.item",
    "DEFAULT_RETRIES": "milepost.graph.models",
    "GateCommand": "milepost.graph.models",
    "ItemDefaults": "milepost.graph.models",
    "Milestone": "milepost.graph.models",
    "TodoItem": "milepost.graph.models",
    "Wait": "milepost.graph.models",
    "WorkItem": "milepost.graph.models",
    "check_name": "milepost.graph.models",
    "Plan": "milepost.graph.plan",
    "PlanCommand": "milepost.graph.plan",
    "PlanDefaults": "milepost.graph.plan",
    "PlanMilestone": "milepost.graph.plan",
    "plan_from_item": "milepost.graph.plan",
    "TRANSITIONS": "milepost.graph.status",
    "Action": "milepost.graph.status",
    "ArtifactStatus": "milepost.graph.status",
    "DisplayStatus": "milepost.graph.status",
    "ItemFilter": "milepost.graph.status",
    "ItemState": "milepost.graph.status",
    "MilestoneStatus": "milepost.graph.status",
    "PlanStatus": "milepost.graph.status",
    "Readiness": "milepost.graph.status",
    "ReadinessState": "milepost.graph.status",
    "TodoState": "milepost.graph.status",
    "WaitKind": "milepost.graph.status",
    "allowed_actions": "milepost.graph.status",
    "retry_at": "milepost.graph.status",
    "transition": "milepost.graph.status",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'milepost.graph' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value

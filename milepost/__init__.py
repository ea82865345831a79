"""milepost: a workflow DAG orchestrator for durable work items.

The public surface is ``__all__``. The domain (``milepost.graph``) and the
errors import eagerly and cheaply; the store and the service load on first
use, and Prefect only when a flow runs, so ``import milepost`` stays fast.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from milepost.errors import (
    BlockedError,
    BudgetSpentError,
    ConcurrentUpdateError,
    CycleError,
    DatabaseUnreachableError,
    DuplicateNameError,
    EnvironmentProblem,
    FrozenPlanError,
    InputError,
    InvalidNameError,
    InvalidValueError,
    MilepostError,
    NotFoundError,
    NotOwnerError,
    PlanError,
    PlanFileError,
    SelfDependencyError,
    SettingsError,
    StaleRevisionError,
    StoreDamagedError,
    StoreNotFoundError,
    TransitionError,
    UnknownDependencyError,
)
from milepost.graph import (
    Action,
    GateCommand,
    ItemState,
    Milestone,
    MilestoneStatus,
    Plan,
    PlanStatus,
    Readiness,
    WorkGraph,
    WorkItem,
)

if TYPE_CHECKING:
    from milepost.gates.command import GateResult, run_gate
    from milepost.planfile import load_plan, parse_plan
    from milepost.results import ActionResult, DoneResult, GateRun, NextResult
    from milepost.service import Service
    from milepost.store import Store

__version__ = "0.1.0"

__all__ = [
    "Action",
    "ActionResult",
    "BlockedError",
    "BudgetSpentError",
    "ConcurrentUpdateError",
    "CycleError",
    "DatabaseUnreachableError",
    "DoneResult",
    "DuplicateNameError",
    "EnvironmentProblem",
    "FrozenPlanError",
    "GateCommand",
    "GateResult",
    "GateRun",
    "InputError",
    "InvalidNameError",
    "InvalidValueError",
    "ItemState",
    "MilepostError",
    "Milestone",
    "MilestoneStatus",
    "NextResult",
    "NotFoundError",
    "NotOwnerError",
    "Plan",
    "PlanError",
    "PlanFileError",
    "PlanStatus",
    "Readiness",
    "SelfDependencyError",
    "Service",
    "SettingsError",
    "StaleRevisionError",
    "Store",
    "StoreDamagedError",
    "StoreNotFoundError",
    "TransitionError",
    "UnknownDependencyError",
    "WorkGraph",
    "WorkItem",
    "__version__",
    "load_plan",
    "parse_plan",
    "run_gate",
]

_LAZY = {
    "Service": "milepost.service",
    "Store": "milepost.store",
    "ActionResult": "milepost.results",
    "DoneResult": "milepost.results",
    "GateRun": "milepost.results",
    "NextResult": "milepost.results",
    "GateResult": "milepost.gates.command",
    "run_gate": "milepost.gates.command",
    "load_plan": "milepost.planfile",
    "parse_plan": "milepost.planfile",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'milepost' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value

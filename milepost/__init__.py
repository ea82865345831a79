"""milepost: a workflow DAG orchestrator for durable work items.

The public surface is ``__all__``. Every name loads on first use (the
domain and the errors, the store and the service; Prefect only when a flow
runs), so ``import milepost`` costs nothing and the CLI decides what it builds.

Imports point one way, in layers, lowest first:
graph < gates < store and service < presentation < flows (Prefect) < interfaces (CLI, MCP).
``milepost.graph`` is the pure domain; ``milepost.gates`` runs gates; the
store and service are ``store``, ``service`` and the values they share
(``errors``, ``settings``, ``results``, ``events``, plan files); ``present``
draws and reports; ``milepost.flows`` is all that needs Prefect; ``cli``,
``mcp_server`` and ``agent`` are the interfaces. The ``layers`` contract in
pyproject.toml checks this order (``make lint`` runs ``lint-imports``);
docs/architecture.md draws it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from milepost.errors import (
        BlockedError,
        BudgetSpentError,
        ConcurrentUpdateError,
        CycleError,
        DatabaseUnreachableError,
        DoerRefusedError,
        DuplicateNameError,
        EnvironmentProblem,
        FrozenPlanError,
        GitError,
        InputError,
        InvalidNameError,
        InvalidValueError,
        MilepostError,
        NotFoundError,
        NotOwnerError,
        PlanError,
        PlanFileError,
        PrefectUnreachableError,
        SelfDependencyError,
        SettingsError,
        StaleRevisionError,
        StoreDamagedError,
        StoreNotFoundError,
        TransitionError,
        UnknownDependencyError,
        UnknownRefError,
    )
    from milepost.gates.command import GateResult, run_gate
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
    "DoerRefusedError",
    "DoneResult",
    "DuplicateNameError",
    "EnvironmentProblem",
    "FrozenPlanError",
    "GateCommand",
    "GateResult",
    "GateRun",
    "GitError",
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
    "PrefectUnreachableError",
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
    "UnknownRefError",
    "WorkGraph",
    "WorkItem",
    "__version__",
    "load_plan",
    "parse_plan",
    "run_gate",
]

_LAZY = {
    "BlockedError": "milepost.errors",
    "BudgetSpentError": "milepost.errors",
    "ConcurrentUpdateError": "milepost.errors",
    "CycleError": "milepost.errors",
    "DatabaseUnreachableError": "milepost.errors",
    "DuplicateNameError": "milepost.errors",
    "EnvironmentProblem": "milepost.errors",
    "FrozenPlanError": "milepost.errors",
    "InputError": "milepost.errors",
    "InvalidNameError": "milepost.errors",
    "InvalidValueError": "milepost.errors",
    "MilepostError": "milepost.errors",
    "NotFoundError": "milepost.errors",
    "NotOwnerError": "milepost.errors",
    "PlanError": "milepost.errors",
    "PlanFileError": "milepost.errors",
    "PrefectUnreachableError": "milepost.errors",
    "SelfDependencyError": "milepost.errors",
    "SettingsError": "milepost.errors",
    "StaleRevisionError": "milepost.errors",
    "UnknownRefError": "milepost.errors",
    "GitError": "milepost.errors",
    "DoerRefusedError": "milepost.errors",
    "StoreDamagedError": "milepost.errors",
    "StoreNotFoundError": "milepost.errors",
    "TransitionError": "milepost.errors",
    "UnknownDependencyError": "milepost.errors",
    "Action": "milepost.graph",
    "GateCommand": "milepost.graph",
    "ItemState": "milepost.graph",
    "Milestone": "milepost.graph",
    "MilestoneStatus": "milepost.graph",
    "Plan": "milepost.graph",
    "PlanStatus": "milepost.graph",
    "Readiness": "milepost.graph",
    "WorkGraph": "milepost.graph",
    "WorkItem": "milepost.graph",
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

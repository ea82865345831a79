"""The tools' arguments: pydantic models that refuse unknown fields; each
model's docstring is its tool's description. Choices are the domain's own
enums where it has them."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from milepost.graph.models import TodoItem, UsageForm
from milepost.graph.status import ItemFilter, PlanStatus, WaitKind

__all__ = ["DriveArgs", "GraphArgs", "MilestoneArgs", "ToolArgs", "WaitArgs", "WorkItemArgs"]

Id = int  # ids are checked by the service (1 to 2**31 - 1)


class ToolArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")


class WorkItemArgs(ToolArgs):
    """create (objective, or plan: YAML/JSON plan text), revise (id's plan to plan, in place), show, list, pick,
    update, complete, cancel."""

    action: Literal["create", "revise", "show", "list", "pick", "update", "complete", "cancel"]
    id: Id | None = Field(None, description="default: the focused item")
    objective: str | None = None
    plan: str | None = Field(None, description="plan file text (create, revise)")
    dry_run: bool = Field(False, description="revise: show the change, write nothing")
    filter: ItemFilter | None = Field(None, description="list (default open)")
    plan_status: PlanStatus | None = None
    todo: list[TodoItem] | None = Field(None, description="update: replaces the list")
    report: str | None = Field(None, description="complete: what was achieved")
    reason: str | None = Field(None, description="cancel, or pick with clear_blocker")
    clear_blocker: bool = False
    expect_revision: int | None = Field(None, description="refuse unless the item is at this revision")


class MilestoneArgs(ToolArgs):
    """next, list, runs (gate and do runs of name), add, remove, edit (gate, deps, inputs, retries, timeout,
    acceptance, do), start, done (runs the gate), verify (proves again what was proven, stale first),
    needs_fix, reset, approve, reject, lock, unlock, confirm."""

    action: Literal[
        "next",
        "list",
        "runs",
        "add",
        "remove",
        "edit",
        "start",
        "done",
        "verify",
        "needs_fix",
        "reset",
        "approve",
        "reject",
        "lock",
        "unlock",
        "confirm",
    ]
    name: str | None = None
    item: Id | None = Field(None, description="default: the focused item")
    deps: list[str] | None = None
    acceptance: str | None = None
    gate: str | None = Field(None, description="shell command, exit 0 passes")
    inputs: list[str] | None = Field(None, description="files the gate proves (gitignore patterns)")
    retries: int | None = None
    timeout: float | None = None
    review: bool = False
    do: str | None = Field(None, description="a command that does the work before the gate (docs/doers.md)")
    do_timeout: float | None = Field(None, description="add: seconds before the do command is killed")
    do_budget_usd: float | None = Field(None, description="add: dollars its doers may cost in all")
    do_usage: UsageForm | None = Field(None, description="add: its doer's usage report form")
    verdict: str | None = Field(None, description="done: a note kept with the gate run")
    reason: str | None = Field(None, description="needs_fix, reset, reject, lock, unlock")
    expect_revision: int | None = None


class WaitArgs(ToolArgs):
    """wait: record what the item waits on; wake: an outside event settles waits on a resource."""

    action: Literal["wait", "wake"]
    item: Id | None = None
    kind: WaitKind | None = None
    resource: str | None = None
    until: datetime | None = Field(None, description="timer: ISO 8601 with a zone")
    reason: str | None = None
    expect_revision: int | None = None


class GraphArgs(ToolArgs):
    """The DAG: layers, critical path, ready, blocked and why."""

    item: Id | None = None


class DriveArgs(ToolArgs):
    """Run every ready gate as a Prefect flow until nothing can move; returns the summary."""

    item: Id | None = None
    max_parallel: int = Field(1, ge=1, le=1000)
    max_doers: int = Field(1, ge=1, le=1000, description="doers (do: commands) at once, apart from the gates")
    until: str | None = Field(None, description="drive only this milestone and its deps")
    expect_revision: int | None = None

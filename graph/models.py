"""Pydantic models of the domain: gate commands, milestones, work items.

Read models (what the store hands out, what ``--json`` prints) ignore
unknown fields; the plan-file models in :mod:`milepost.graph.plan` forbid them.
"""

from __future__ import annotations

import re
from datetime import datetime
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field

from milepost.errors import InvalidNameError, InvalidValueError
from milepost.graph.status import ItemState, MilestoneStatus, PlanStatus

__all__ = [
    "DEFAULT_RETRIES",
    "NAME_RULE",
    "GateCommand",
    "ItemDefaults",
    "Milestone",
    "PlanArtifact",
    "TodoItem",
    "Wait",
    "WorkItem",
    "WorkRef",
    "check_name",
    "check_retries",
    "check_timeout",
]

DEFAULT_RETRIES = 2

_NAME_RE = re.compile(r"^[a-z][a-z0-9._-]{0,63}$")
NAME_RULE = "1-64 characters: lowercase letters, digits, '-', '_' or '.', starting with a letter"


def check_name(name: str, what: str = "milestone") -> str:
    """Return ``name`` if it is a valid slug, else raise :class:`InvalidNameError`."""
    if not isinstance(name, str) or not _NAME_RE.match(name):
        raise InvalidNameError(f"invalid {what} name {name!r}: use {NAME_RULE}", name=name)
    return name


def check_retries(value: int | None, owner: str) -> int | None:
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
        raise InvalidValueError(
            f"invalid retries {value!r} for {owner}: must be a whole number >= 0", field="retries", value=value
        )
    return value


def check_timeout(value: float | None, owner: str) -> float | None:
    if value is not None and (isinstance(value, bool) or not isinstance(value, int | float) or value <= 0):
        raise InvalidValueError(
            f"invalid timeout {value!r} for {owner}: must be a number of seconds > 0", field="timeout", value=value
        )
    return value


class _Read(BaseModel):
    model_config = ConfigDict(extra="ignore", use_enum_values=False)


class GateCommand(_Read):
    """One command of a gate: run with ``/bin/sh -c``; passes when it exits 0."""

    name: str = "gate"
    run: str
    cwd: str | None = None
    env: dict[str, str] = Field(default_factory=dict)
    timeout: Annotated[float, Field(gt=0)] | None = None


class Milestone(_Read):
    id: Annotated[int, Field(ge=1)]
    name: str
    deps: list[str] = Field(default_factory=list)
    acceptance: str = ""
    gate: list[GateCommand] = Field(default_factory=list)
    status: MilestoneStatus = MilestoneStatus.PENDING
    attempts: Annotated[int, Field(ge=0)] = 0
    retries: Annotated[int, Field(ge=0)] = DEFAULT_RETRIES
    timeout: Annotated[float, Field(gt=0)] | None = None
    review: bool = False
    awaiting_review: bool = False
    fix: str | None = None
    retry_delay: Annotated[float, Field(ge=0)] | None = None
    retry_at: datetime | None = None
    reason: str | None = None
    updated_at: datetime | None = None

    @property
    def max_attempts(self) -> int:
        return 1 + self.retries

    @property
    def budget_left(self) -> bool:
        return self.attempts < self.max_attempts

    @property
    def has_gate(self) -> bool:
        return bool(self.gate)

    @property
    def is_stuck(self) -> bool:
        """Stuck, or sent back for a fix with no budget left: only an
        operator's reset moves it again."""
        return self.status is MilestoneStatus.STUCK or (
            self.status is MilestoneStatus.NEEDS_FIX and not self.budget_left
        )


class ItemDefaults(_Read):
    retries: Annotated[int, Field(ge=0)] = DEFAULT_RETRIES
    timeout: Annotated[float, Field(gt=0)] | None = None
    fix: str | None = None
    retry_delay: Annotated[float, Field(ge=0)] | None = None


class TodoItem(_Read):
    text: str
    state: str = "pending"


class Wait(_Read):
    kind: str
    resource: str | None = None
    reason: str = ""
    deadline: datetime | None = None
    since: datetime | None = None


class WorkRef(_Read):
    """Evidence: a gate run's log, a fix, a PR, a document."""

    kind: str
    ref: str
    reason: str = ""
    at: datetime | None = None


class PlanArtifact(_Read):
    """The item's plan.md, as found on disk (never invented)."""

    path: str
    status: str  # available | missing | unreadable
    sha256: str | None = None
    size: int | None = None
    preview: str | None = None
    preview_complete: bool = False


class WorkItem(_Read):
    id: int
    agent: str
    objective: str
    state: ItemState = ItemState.OPEN
    plan_status: PlanStatus = PlanStatus.DRAFT
    readiness: str = "runnable"
    readiness_state: str = ""
    readiness_reason: str = ""
    current: bool = False
    revision: int = 1
    todo_list: list[TodoItem] = Field(default_factory=list)
    blocked_by: str | None = None
    recheck_at: datetime | None = None
    waits: list[Wait] = Field(default_factory=list)
    after: int | None = None
    report: str | None = None
    cancel_reason: str | None = None
    defaults: ItemDefaults = Field(default_factory=ItemDefaults)
    created_at: datetime | None = None
    updated_at: datetime | None = None
    completed_at: datetime | None = None
    milestones: list[Milestone] = Field(default_factory=list)

"""What the service layer returns. The CLI formats these; ``--json`` prints
``model_dump(mode="json")`` of them, so the field names here are the contract."""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, Field

from milepost.gates.outcome import CachedFrom, GateResult, Outcome
from milepost.graph.models import Milestone, WorkItem
from milepost.graph.status import (
    Action,
    DisplayStatus,
    ItemState,
    MilestoneStatus,
    PlanStatus,
    Readiness,
    ReadinessState,
)

__all__ = [
    "ActionResult",
    "Claim",
    "CompletionResult",
    "DoRun",
    "DoneResult",
    "DryRun",
    "GateRun",
    "ItemSummary",
    "MilestoneChange",
    "MilestoneView",
    "NextResult",
    "StaleInfo",
    "Verified",
    "VerifyResult",
]


class Claim(BaseModel):
    """A leased gate attempt: the milestone is in progress and ``owner`` runs
    its gate. Everything a gate task needs travels in here (it is pickled to
    Dask workers)."""

    item: int
    pk: int
    milestone: Milestone
    attempt: int
    owner: str
    log_path: str
    # A re-proof of a done milestone (verify, or a drive re-proving a stale one):
    # a pass spends no budget, an interruption leaves it done.
    reproof: bool = False
    # Until when the lease was taken (this process's clock): while the store is out of reach, the claim is taken
    # for this driver's only until then.
    leased_until: datetime | None = None


class StaleInfo(BaseModel):
    """Why a done milestone is stale: the paths changed since its proof
    (the first few; ``changed_count`` says how many in all)."""

    changed: list[str] = Field(default_factory=list)
    changed_count: int = 0
    reason: str = ""


class MilestoneChange(BaseModel):
    milestone: str
    action: Action
    from_status: MilestoneStatus
    to_status: MilestoneStatus
    reason: str | None = None


class ActionResult(BaseModel):
    """A milestone action that was applied."""

    item: int
    revision: int
    milestone: Milestone
    changes: list[MilestoneChange] = Field(default_factory=list)


class GateRun(GateResult):
    """One recorded gate attempt of a milestone (evidence)."""

    item: int
    milestone: str
    attempt: int
    verdict: str | None = None


class DoRun(BaseModel):
    """What a doer did in one attempt (evidence; docs/doers.md). ``outcome``:
    passed (it exited 0 and its change was committed), failed (its exit
    status, its timeout), refused (a protected path, no change, the same
    change again), interrupted (its driver stopped)."""

    item: int
    milestone: str
    attempt: int
    outcome: str
    reason: str
    exit_code: int | None = None
    duration: float = 0.0
    tail: str = ""
    log_path: str | None = None
    host: str | None = None
    command: str
    worktree: str | None = None
    base_commit: str | None = None
    result_commit: str | None = None
    diff_stat: str | None = None
    diff_digest: str | None = None
    cost_usd: float | None = None
    tokens: int | None = None
    session: str | None = None  # the agent's session (thread) id, from its usage report
    usage_warning: str | None = None  # its usage report unread, or figures left out: nothing counted for them
    merge_commit: str | None = None
    files: list[str] | None = None  # the paths its change touched (None: no change committed, or not known)
    started_at: datetime
    finished_at: datetime


class DoneResult(BaseModel):
    """``done``: the milestone after the attempt, and the gate run if there was a gate.
    ``passed`` is False when the gate failed (exit code 1 in the CLI)."""

    item: int
    revision: int
    milestone: Milestone
    passed: bool
    gate_run: GateRun | None = None
    changes: list[MilestoneChange] = Field(default_factory=list)
    note: str | None = None


class NextResult(BaseModel):
    item: int
    milestone: Milestone | None
    reason: str
    ready: list[str] = Field(default_factory=list)  # the first 50 ready, lowest id first
    more_ready: bool = False  # more than those are ready


class MilestoneView(Milestone):
    """A milestone with its derived view: ``ready``/``blocked`` folded into ``view``."""

    view: DisplayStatus
    waiting_on: list[str] = Field(default_factory=list)
    last_run: str | None = None  # the reason of its last gate run
    last_attempt: int | None = None  # the number of its last gate run (attempts are numbered across resets)
    stale: StaleInfo | None = None
    # A failed milestone the drive will not retry until its inputs change.
    waiting_for_change: str | None = None


class ItemSummary(BaseModel):
    """A work item without its milestones, for listings."""

    id: int
    agent: str
    objective: str
    state: ItemState
    plan_status: PlanStatus
    readiness: Readiness
    revision: int
    readiness_state: ReadinessState
    readiness_reason: str = ""
    current: bool = False
    counts: dict[DisplayStatus, int] = Field(default_factory=dict)


class DryRun(BaseModel):
    """``drive --dry-run``: the order a drive would take if every gate passed
    (``stale`` ones are re-proofs), and the failed milestones it would not
    retry because their inputs did not change."""

    item: int
    order: list[str]
    stale: dict[str, StaleInfo] = Field(default_factory=dict)
    waiting: dict[str, str] = Field(default_factory=dict)
    left: dict[str, str] = Field(default_factory=dict)  # not done and not run by it: why (stuck, waits for ...)


class Verified(BaseModel):
    """One milestone of ``verify``: how its re-proof went."""

    milestone: str
    outcome: Outcome | None = None  # None: not run (skipped)
    status: MilestoneStatus
    attempt: int | None = None
    duration: float = 0.0
    reason: str
    stale: StaleInfo | None = None
    reopened: list[str] = Field(default_factory=list)
    cached_from: CachedFrom | None = None  # outcome cached: the passed run that stands in
    log: str | None = None  # a failed re-proof: its gate's log, and the last lines of its output (as done shows)
    last_lines: list[str] = Field(default_factory=list)


class VerifyResult(BaseModel):
    """``verify``: ok when every milestone it looked at (those a gate proved
    once, or the ones named) is done and none is stale at its end."""

    item: int
    ok: bool
    verified: list[Verified] = Field(default_factory=list)  # what it ran, or could not run
    unchanged: list[str] = Field(default_factory=list)  # done, inputs unchanged since proven: not run
    unchecked: list[str] = Field(default_factory=list)  # done, without inputs: not run (only --all re-runs them)
    message: str


class CompletionResult(BaseModel):
    item: WorkItem
    already: bool
    message: str
    warnings: list[str] = Field(default_factory=list)


def item_with_views(item: WorkItem, views: list[MilestoneView]) -> dict[str, object]:
    data = item.model_dump(mode="json", exclude={"milestones"})
    data["milestones"] = [v.model_dump(mode="json") for v in views]
    return data

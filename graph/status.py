"""Statuses, actions, the milestone transition table and the retry backoff;
every other state of the domain as an enum.

The table is data: ``TRANSITIONS[(status, action)]`` is the status an action
leads to. :func:`transition` is the one function that applies it; everything
else (the DAG, the store, the CLI) goes through it, so a refusal always reads
the same way and names what would have been allowed. :func:`retry_at` says
when a failed attempt may run again, next to the rules that make it fail.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from enum import StrEnum

from milepost.graph.errors import TransitionError

__all__ = [
    "REASON_REQUIRED",
    "TRANSITIONS",
    "USER_ACTIONS",
    "Action",
    "ArtifactStatus",
    "DisplayStatus",
    "Isolation",
    "ItemFilter",
    "ItemState",
    "MilestoneStatus",
    "PlanStatus",
    "Readiness",
    "ReadinessState",
    "TodoState",
    "WaitKind",
    "allowed_actions",
    "retry_at",
    "transition",
]


class MilestoneStatus(StrEnum):
    """What is stored for a milestone. ``ready`` and ``blocked`` are views, never stored."""

    HYPOTHESIS = "hypothesis"
    PENDING = "pending"
    LOCKED = "locked"
    IN_PROGRESS = "in_progress"
    NEEDS_FIX = "needs_fix"
    DONE = "done"
    STUCK = "stuck"

    @property
    def is_done(self) -> bool:
        return self is MilestoneStatus.DONE


class DisplayStatus(StrEnum):
    """What a person sees for a milestone: the stored status with the derived
    views folded in (``ready``, ``blocked``, ``in_review``; ``stuck`` also
    for needs_fix with no budget left; ``stale`` for a done milestone whose
    inputs changed since its gate passed). See :func:`milepost.graph.dag.display_status`."""

    DONE = "done"
    STALE = "stale"
    READY = "ready"
    IN_PROGRESS = "in_progress"
    IN_REVIEW = "in_review"
    NEEDS_FIX = "needs_fix"
    STUCK = "stuck"
    BLOCKED = "blocked"
    PENDING = "pending"
    LOCKED = "locked"
    HYPOTHESIS = "hypothesis"


class Action(StrEnum):
    """Milestone actions. ``fail`` and ``exhaust`` are the two outcomes of a
    failed gate under ``done`` (``reject`` too has both), ``await_review`` the
    outcome of a passing gate that needs an operator's verdict, and
    ``release`` hands an interrupted claim back. ``reprove`` claims a done
    milestone to run its gate again (``verify``, or a drive re-proving a
    stale one), ``restore`` hands an interrupted re-proof back (done, still
    stale), and ``reopen`` moves a done milestone back to pending behind a
    dep that was reopened. Users never name those seven."""

    CONFIRM = "confirm"
    START = "start"
    DONE = "done"
    FAIL = "fail"
    EXHAUST = "exhaust"
    NEEDS_FIX = "needs_fix"
    RESET = "reset"
    LOCK = "lock"
    UNLOCK = "unlock"
    RELEASE = "release"
    AWAIT_REVIEW = "await_review"
    APPROVE = "approve"
    REJECT = "reject"
    REPROVE = "reprove"
    RESTORE = "restore"
    REOPEN = "reopen"

    @property
    def command(self) -> str:
        """The CLI spelling of the action."""
        return self.value.replace("_", "-")

    @property
    def verb(self) -> str:
        """The action in a sentence ("cannot finish 'a'"): its command, where that reads as a verb."""
        return {"done": "finish", "needs_fix": "mark needs-fix"}.get(self.value, self.command)


S = MilestoneStatus
A = Action

TRANSITIONS: dict[tuple[MilestoneStatus, Action], MilestoneStatus] = {
    (S.HYPOTHESIS, A.CONFIRM): S.PENDING,
    (S.PENDING, A.START): S.IN_PROGRESS,
    (S.NEEDS_FIX, A.START): S.IN_PROGRESS,
    (S.IN_PROGRESS, A.DONE): S.DONE,
    (S.IN_PROGRESS, A.FAIL): S.NEEDS_FIX,
    (S.IN_PROGRESS, A.EXHAUST): S.STUCK,
    (S.IN_PROGRESS, A.NEEDS_FIX): S.NEEDS_FIX,
    (S.DONE, A.NEEDS_FIX): S.NEEDS_FIX,
    (S.STUCK, A.RESET): S.NEEDS_FIX,
    (S.NEEDS_FIX, A.RESET): S.NEEDS_FIX,
    (S.PENDING, A.LOCK): S.LOCKED,
    (S.LOCKED, A.UNLOCK): S.PENDING,
    # An interrupted claim (driver stopped or killed): ready again, budget unspent.
    (S.IN_PROGRESS, A.RELEASE): S.PENDING,
    # Review gate: the commands passed, the milestone waits for a verdict.
    (S.IN_PROGRESS, A.AWAIT_REVIEW): S.IN_PROGRESS,
    (S.IN_PROGRESS, A.APPROVE): S.DONE,
    (S.IN_PROGRESS, A.REJECT): S.NEEDS_FIX,
    # Proof bound to inputs: a done milestone's gate runs again (its budget
    # is not spent by a pass); an interrupted re-proof leaves it done (and
    # still stale); a failed one reopens what was built on it, as pending.
    (S.DONE, A.REPROVE): S.IN_PROGRESS,
    (S.IN_PROGRESS, A.RESTORE): S.DONE,
    (S.DONE, A.REOPEN): S.PENDING,
}

# Actions an operator must justify; the reason is kept in the event log.
REASON_REQUIRED = frozenset({A.NEEDS_FIX, A.RESET, A.LOCK, A.UNLOCK, A.REJECT})

# What a user can type; ``fail``/``exhaust`` happen inside ``done``.
USER_ACTIONS = (A.CONFIRM, A.START, A.DONE, A.NEEDS_FIX, A.RESET, A.LOCK, A.UNLOCK, A.APPROVE, A.REJECT)

del S, A


def retry_at(finished_at: datetime, delay: float | None, attempts_before: int) -> datetime | None:
    """When a failed attempt may run again: exponential backoff from the
    milestone's ``retry_delay`` (delay, 2 x delay, 4 x delay, ...), counted by
    the attempts made before this one. None: at once (no delay set)."""
    if not delay:
        return None
    return finished_at + timedelta(seconds=delay * 2**attempts_before)


def allowed_actions(status: MilestoneStatus) -> list[Action]:
    """User actions the table accepts from ``status``, in a stable order."""
    return [a for a in USER_ACTIONS if (status, a) in TRANSITIONS]


def transition(name: str, status: MilestoneStatus, action: Action) -> MilestoneStatus:
    """Return the status ``action`` leads to from ``status``, or raise a
    :class:`TransitionError` that names the milestone, its status and what is allowed."""
    try:
        return TRANSITIONS[(status, action)]
    except KeyError:
        allowed = allowed_actions(status)
        options = ", ".join(a.command for a in allowed) if allowed else "nothing (an operator must act)"
        if status is MilestoneStatus.STUCK:
            options = "reset (operator, with --reason)"
        if action is Action.DONE and Action.START in allowed:
            options += f" (start it first: milepost start {name})"
        raise TransitionError(
            f"cannot {action.verb} {name!r}: status is {status.value}; allowed from {status.value}: {options}",
            milestone=name,
            status=status.value,
            action=action.value,
            allowed=[a.command for a in allowed],
        ) from None


class ItemState(StrEnum):
    OPEN = "open"
    COMPLETED = "completed"
    CANCELLED = "cancelled"

    @property
    def is_final(self) -> bool:
        return self is not ItemState.OPEN


class PlanStatus(StrEnum):
    DRAFT = "draft"
    READY = "ready"
    NEEDS_INPUT = "needs_input"


class Readiness(StrEnum):
    """Coarse readiness of a work item: what a scheduler needs to know."""

    RUNNABLE = "runnable"
    WAITING_FOR_OPERATOR = "waiting_for_operator"
    BLOCKED = "blocked"
    COMPLETED = "completed"
    CANCELLED = "cancelled"


class ReadinessState(StrEnum):
    """The fine state behind an item's readiness: which wait, which blocker,
    what the DAG says (see :mod:`milepost.graph.item`)."""

    COMPLETED = "completed"
    CANCELLED = "cancelled"
    WAITING_TASK_RESULT = "waiting_task_result"
    WAITING_OPERATOR_INPUT = "waiting_operator_input"
    WAITING_TIMER = "waiting_timer"
    WAITING_EXTERNAL = "waiting_external"
    WAITING_SYSTEM = "waiting_system"
    BLOCKED_BY = "blocked_by"
    AFTER_ITEM = "after_item"
    NEEDS_INPUT = "needs_input"
    PLANNING = "planning"
    MILESTONE_READY = "milestone_ready"
    AWAITING_REPORT = "awaiting_report"
    STALE = "stale"  # every milestone is done, some on inputs that changed since: re-prove them
    IN_PROGRESS = "in_progress"
    REVIEW = "review"
    STUCK = "stuck"
    HELD = "held"


class WaitKind(StrEnum):
    TASK_RESULT = "task_result"
    OPERATOR_INPUT = "operator_input"
    TIMER = "timer"
    EXTERNAL = "external"
    SYSTEM = "system"


class TodoState(StrEnum):
    PENDING = "pending"
    IN_PROGRESS = "in_progress"
    COMPLETED = "completed"


class ArtifactStatus(StrEnum):
    """How the item's plan.md was found on disk."""

    AVAILABLE = "available"
    MISSING = "missing"
    UNREADABLE = "unreadable"


class Isolation(StrEnum):
    """Where a doer works (an item's ``doer.isolate``): a git worktree of its
    own per milestone, or the workspace itself, one doer at a time."""

    WORKTREE = "worktree"
    NONE = "none"


class ItemFilter(StrEnum):
    """What ``item list --filter`` keeps: every item, by state, this agent's
    current one, the queue (open runnable items that are not current), or by readiness."""

    ALL = "all"
    OPEN = "open"
    COMPLETED = "completed"
    CANCELLED = "cancelled"
    CURRENT = "current"
    QUEUED = "queued"
    BLOCKED = "blocked"
    WAITING_FOR_OPERATOR = "waiting_for_operator"
    RUNNABLE = "runnable"

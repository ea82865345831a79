"""Statuses, actions and the milestone transition table.

The table is data: ``TRANSITIONS[(status, action)]`` is the status an action
leads to. :func:`transition` is the one function that applies it; everything
else (the DAG, the store, the CLI) goes through it, so a refusal always reads
the same way and names what would have been allowed.
"""

from __future__ import annotations

from enum import StrEnum

from milepost.errors import TransitionError

__all__ = [
    "REASON_REQUIRED",
    "TRANSITIONS",
    "USER_ACTIONS",
    "Action",
    "ItemState",
    "MilestoneStatus",
    "PlanStatus",
    "allowed_actions",
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


class Action(StrEnum):
    """Milestone actions. ``fail`` and ``exhaust`` are the two outcomes of a
    failed gate under ``done`` (``reject`` too has both), ``await_review`` the
    outcome of a passing gate that needs an operator's verdict, and
    ``release`` hands an interrupted claim back; users never name those four."""

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

    @property
    def command(self) -> str:
        """The CLI spelling of the action."""
        return self.value.replace("_", "-")


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
}

# Actions an operator must justify; the reason is kept in the event log.
REASON_REQUIRED = frozenset({A.NEEDS_FIX, A.RESET, A.LOCK, A.UNLOCK, A.REJECT})

# What a user can type; ``fail``/``exhaust`` happen inside ``done``.
USER_ACTIONS = (A.CONFIRM, A.START, A.DONE, A.NEEDS_FIX, A.RESET, A.LOCK, A.UNLOCK, A.APPROVE, A.REJECT)

del S, A


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
        raise TransitionError(
            f"cannot {action.command} {name!r}: status is {status.value}; allowed from {status.value}: {options}",
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

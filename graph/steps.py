"""One milestone's moves, as pure functions of the milestone and what they
need to know about its neighbours (its deps that are not done).

:class:`~milepost.graph.dag.WorkGraph` applies them to a whole graph; the
service applies the same functions to the few rows a write reads, so a
transition never needs the whole graph (see ``docs/decisions.md``,
"writes touch what changes"). Each returns the new milestone and the action
that names the move (``done`` may become ``await_review``, a failed attempt
``fail`` or ``exhaust``); refusals raise with the milestone, its status and
what would be allowed.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from milepost.graph.errors import (
    BlockedError,
    BudgetSpentError,
    DuplicateNameError,
    InvalidValueError,
    SelfDependencyError,
    TransitionError,
    UnknownDependencyError,
)
from milepost.graph.hints import known_names
from milepost.graph.models import (
    GateCommand,
    Milestone,
    check_command,
    check_delay,
    check_do,
    check_env,
    check_inputs,
    check_name,
    check_retries,
    check_text,
    check_timeout,
)
from milepost.graph.status import REASON_REQUIRED, Action, DisplayStatus, MilestoneStatus, retry_at, transition

__all__ = [
    "Change",
    "act",
    "display_status",
    "is_ready_status",
    "new_milestone",
    "nothing_ready_reason",
    "record_attempt",
    "review",
]

S = MilestoneStatus


@dataclass(frozen=True)
class Change:
    """One milestone moved by an action: what it was, what it is, and why."""

    before: Milestone
    after: Milestone
    action: Action
    reason: str | None = None


def is_ready_status(m: Milestone) -> bool:
    """Whether the status lets ``m`` start once its deps are done."""
    return m.status is S.PENDING or (m.status is S.NEEDS_FIX and m.budget_left)


def display_status(m: Milestone, *, deps_done: bool, held: bool = False, stale: bool = False) -> DisplayStatus:
    """The stored status with the derived views folded in: a ready milestone
    shows ``ready``, a pending one waiting on deps ``blocked``, a done one
    whose inputs changed since its proof ``stale``."""
    if stale and m.status is S.DONE:
        return DisplayStatus.STALE
    if m.awaiting_review:
        return DisplayStatus.IN_REVIEW
    if is_ready_status(m) and deps_done and not held:
        return DisplayStatus.READY if m.status is S.PENDING else DisplayStatus.NEEDS_FIX
    if m.status is S.PENDING:
        return DisplayStatus.BLOCKED
    if m.is_stuck:
        return DisplayStatus.STUCK
    return DisplayStatus(m.status.value)


def _blocked(what: str, name: str, undone_deps: Sequence[Milestone]) -> BlockedError:
    """``what``, then the deps that are not done, with their statuses."""
    listed = ", ".join(f"{d.name} ({d.status.value})" for d in undone_deps)
    return BlockedError(f"{what} {listed}", milestone=name, waiting_on=[d.name for d in undone_deps])


def act(m: Milestone, action: Action, *, undone_deps: Sequence[Milestone] = (), reason: str | None = None) -> Change:
    """A user action (start, done without a gate, needs_fix, reset, lock,
    unlock, confirm, release, and the re-proof's reprove, restore and
    reopen) on one milestone. ``undone_deps``: its deps that are not done
    (``start`` and ``reprove`` refuse while there are any). ``needs_fix`` of
    a done milestone also reopens its done dependents: the graph does that part."""
    _check_user_action(m.name, action, reason)
    target = transition(m.name, m.status, action)
    update: dict[str, Any] = {"status": target, "reason": reason}
    action = _action_update(m, action, undone_deps, reason, update)
    if action in (Action.NEEDS_FIX, Action.RELEASE, Action.RESET, Action.REOPEN):
        update["awaiting_review"] = False
    if action in (Action.NEEDS_FIX, Action.RESET, Action.REOPEN):
        # The proof (or the failure) it stood on no longer describes it.
        update["fingerprint"] = None
    return Change(m, m.model_copy(update=update), action, reason)


def _check_user_action(name: str, action: Action, reason: str | None) -> None:
    """Refuse a gate's outcome or a review verdict passed as a user action, and a missing reason."""
    if action in (Action.FAIL, Action.EXHAUST, Action.AWAIT_REVIEW):
        raise InvalidValueError(f"{action.value} is the outcome of a gate run; use record_attempt()")
    if action in (Action.APPROVE, Action.REJECT):
        raise InvalidValueError(f"{action.value} is a review verdict; use review()")
    if action in REASON_REQUIRED and not (reason and reason.strip()):
        raise InvalidValueError(
            f"{action.command} {name!r} needs a reason: pass --reason TEXT", milestone=name, action=action.value
        )


def _action_update(
    m: Milestone, action: Action, undone_deps: Sequence[Milestone], reason: str | None, update: dict[str, Any]
) -> Action:
    """Check what the action needs of ``m``, add its own changes to ``update``; the action it is recorded as."""
    if action is Action.REPROVE:
        _check_reprove(m, undone_deps)
        update["reason"] = reason or "re-proof"
    elif action is Action.START:
        _check_start(m, undone_deps)
        update["retry_at"] = None
    elif action is Action.DONE:
        return _done_update(m, update)
    elif action is Action.RELEASE:
        update["reason"] = reason or "released"
    elif action is Action.RESET:
        update["attempts"] = 0
    elif action is Action.REOPEN:
        # Not its failure: a fresh budget for the rebuild behind its dep.
        update["attempts"] = 0
    return action


def _check_reprove(m: Milestone, undone_deps: Sequence[Milestone]) -> None:
    """Refuse to re-prove a milestone without a gate, or one whose deps are not done."""
    name = m.name
    if not m.has_gate:
        raise TransitionError(f"cannot re-prove {name!r}: it has no gate to run", milestone=name)
    if undone_deps:
        raise _blocked(f"cannot re-prove {name!r}: its deps are not done:", name, undone_deps)


def _check_start(m: Milestone, undone_deps: Sequence[Milestone]) -> None:
    """Refuse to start a milestone whose deps are not done, or whose retry budget is spent."""
    name = m.name
    if undone_deps:
        raise _blocked(f"cannot start {name!r}: blocked by", name, undone_deps)
    if not m.budget_left:
        raise BudgetSpentError(
            f"cannot start {name!r}: retry budget spent ({m.attempts} of {m.max_attempts} attempts);"
            f" an operator can `milepost reset {name} --reason TEXT`",
            milestone=name,
        )


def _done_update(m: Milestone, update: dict[str, Any]) -> Action:
    """Check a ``done`` without a gate, send a reviewed milestone to review in ``update``; DONE or AWAIT_REVIEW."""
    name = m.name
    if m.awaiting_review:
        raise TransitionError(
            f"cannot finish {name!r}: its gate passed and it waits for review; allowed: approve, reject --reason",
            milestone=name,
        )
    if m.has_gate:
        raise InvalidValueError(f"{name!r} has a gate: its outcome is recorded with record_attempt()")
    if m.review:
        update["status"] = S.IN_PROGRESS
        update["awaiting_review"] = True
        return Action.AWAIT_REVIEW
    return Action.DONE


def record_attempt(
    m: Milestone,
    passed: bool,
    reason: str | None = None,
    *,
    at: datetime | None = None,
    free: bool = False,
    fingerprint: str | None = None,
    final: bool = False,
) -> Change:
    """One finished gate attempt of an in-progress milestone: pass -> done
    (or waiting for review when it has a review gate); fail -> needs_fix
    while budget is left (ready again at the backoff's :func:`retry_at`
    when the attempt finished ``at``), else stuck. A ``free`` attempt (a
    re-proof of a done milestone, or a cached result) spends no budget when
    it passes; a failing re-proof is the first attempt of a fresh budget
    (the seed's second verification failed: the work is open again).
    ``fingerprint``: of the inputs the attempt ran on. A ``final`` failure
    is stuck whatever budget is left: no later attempt could go otherwise
    (its doers' money is spent, docs/doers.md)."""
    name = m.name
    if m.awaiting_review:
        raise TransitionError(f"{name!r} waits for review; its gate already passed", milestone=name)
    # A failing re-proof is the first failure of a new round (the milestone had passed):
    # a fresh budget, not what was left of the round it passed in.
    attempts = (m.attempts if passed else 1) if free else m.attempts + 1
    review_ = False
    when = None
    if passed:
        review_ = m.review
        action = Action.AWAIT_REVIEW if review_ else Action.DONE
    else:
        action = Action.FAIL if attempts < m.max_attempts and not final else Action.EXHAUST
        if action is Action.FAIL and at is not None:
            when = retry_at(at, m.retry_delay, attempts - 1)  # (the failures before this one, in its round)
    target = transition(name, m.status, action)
    new = m.model_copy(
        update={
            "status": target,
            "attempts": attempts,
            "reason": reason,
            "awaiting_review": review_,
            "retry_at": when,
            "fingerprint": fingerprint,
        }
    )
    return Change(m, new, action, reason)


def review(m: Milestone, approve: bool, reason: str | None = None) -> Change:
    """An operator's verdict on a milestone whose gate passed: approve ->
    done; reject -> needs_fix, or stuck when the budget is spent."""
    name = m.name
    action = Action.APPROVE if approve else Action.REJECT
    target = transition(name, m.status, action)
    if not m.awaiting_review:
        raise TransitionError(
            f"cannot {action.command} {name!r}: it is not waiting for review (status {m.status.value})",
            milestone=name,
        )
    if not approve and not (reason and reason.strip()):
        raise InvalidValueError(f"reject {name!r} needs a reason: pass --reason TEXT", milestone=name)
    if not approve and not m.budget_left:
        target = transition(name, m.status, Action.EXHAUST)
    new = m.model_copy(update={"status": target, "awaiting_review": False, "reason": reason})
    return Change(m, new, action, reason)


def new_milestone(
    new_id: int,
    name: str,
    deps: Sequence[str] = (),
    *,
    lookup: Callable[[str], int | None],
    known: Callable[[], list[str]],
    acceptance: str = "",
    gate: Sequence[object] = (),
    retries: int = 2,
    timeout: float | None = None,
    review: bool = False,
    fix: str | None = None,
    retry_delay: float | None = None,
    hypothesis: bool = False,
    inputs: Sequence[str] = (),
    cache: bool = True,
    flaky: bool = False,
    do: str | None = None,
    do_timeout: float | None = None,
    do_budget_usd: float | None = None,
    do_usage: str | None = None,
) -> Milestone:
    """A milestone to add as ``new_id``: validated, and its deps must exist
    already (so no cycle can form). ``lookup(name)``: the id of an existing
    milestone (None when there is none); ``known()``: names for the message."""
    check_name(name)
    owner = f"milestone {name!r}"
    check_retries(retries, owner)
    check_timeout(timeout, owner)
    check_delay(retry_delay, owner)
    check_text(acceptance, f"the acceptance text of {owner}")
    if fix is not None:
        check_command(fix, f"the fix command of {owner}")
    check_do(do, do_timeout, do_budget_usd, owner, do_usage)
    inputs = check_inputs(inputs, owner)
    if inputs and not gate:
        raise InvalidValueError(
            f"{owner} has inputs but no gate: inputs bind a gate's proof to files; add a gate or drop the inputs",
            milestone=name,
        )
    for g in gate:
        if isinstance(g, GateCommand):
            check_command(g.run, f"the gate of {owner}")
            check_env(g.env, f"the gate of {owner}")
            check_timeout(g.timeout, f"the gate of {owner}")
    existing = lookup(name)
    if existing is not None:
        raise DuplicateNameError(
            f"milestone {name!r} already exists (id {existing}); names are unique in a work item", milestone=name
        )
    deps = list(dict.fromkeys(deps))
    if name in deps:
        raise SelfDependencyError(f"milestone {name!r} lists itself in its deps", milestone=name)
    for d in deps:
        if lookup(d) is None:
            raise UnknownDependencyError(
                f"milestone {name!r} depends on unknown milestone {d!r}; {known_names(d, known())}",
                milestone=name,
                dep=d,
            )
    return Milestone.model_validate(
        {
            "id": new_id,
            "name": name,
            "deps": deps,
            "acceptance": acceptance,
            "gate": list(gate),
            "retries": retries,
            "timeout": timeout,
            "review": review,
            "fix": fix,
            "retry_delay": retry_delay,
            "status": S.HYPOTHESIS if hypothesis else S.PENDING,
            "inputs": inputs,
            "cache": cache,
            "flaky": flaky,
            "do": do,
            "do_timeout": do_timeout,
            "do_budget_usd": do_budget_usd,
            "do_usage": do_usage,
        }
    )


def nothing_ready_reason(
    total: int, done: int, milestones: Iterable[Milestone], held: set[str] | frozenset[str] = frozenset()
) -> str:
    """Why ``next`` names no milestone: none yet, all done, or what holds the
    rest (in progress, in review, retry delayed, stuck, locked, unconfirmed).
    ``milestones``: at least every one that is neither done nor pending, by id."""
    if not total:
        return "no milestones yet: add one with `milepost add NAME`"
    if done == total:
        return f"all {total} milestones are done" if total != 1 else "the milestone is done"
    by: dict[S, list[str]] = {}
    review: list[str] = []
    held_: list[str] = []
    for m in milestones:
        status = S.STUCK if m.is_stuck else m.status
        if m.awaiting_review:
            review.append(m.name)
            continue
        if m.name in held and is_ready_status(m):
            held_.append(m.name)
            continue
        by.setdefault(status, []).append(m.name)
    parts: list[str] = []
    if S.IN_PROGRESS in by:
        parts.append("waiting on " + ", ".join(by[S.IN_PROGRESS]) + " (in_progress)")
    if review:
        parts.append("waiting for review: " + ", ".join(review) + " (approve, or reject --reason)")
    if held_:
        parts.append("retry delayed: " + ", ".join(held_))
    if S.STUCK in by:
        parts.append("stuck: " + ", ".join(by[S.STUCK]) + " (reset with --reason)")
    if S.LOCKED in by:
        parts.append("locked: " + ", ".join(by[S.LOCKED]))
    if S.HYPOTHESIS in by:
        parts.append("unconfirmed: " + ", ".join(by[S.HYPOTHESIS]))
    return "nothing ready: " + "; ".join(parts) if parts else "nothing ready"

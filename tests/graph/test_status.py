"""The transition table, pair by pair: every (status, action) either leads
where the design says or is refused with the status and the allowed actions."""

from __future__ import annotations

import itertools

import pytest

from milepost.errors import TransitionError
from milepost.graph.status import TRANSITIONS, Action, MilestoneStatus, allowed_actions, transition

S, A = MilestoneStatus, Action

# The design's table, written out independently of the implementation's dict.
EXPECTED = {
    ("hypothesis", "confirm"): "pending",
    ("pending", "start"): "in_progress",
    ("needs_fix", "start"): "in_progress",
    ("in_progress", "done"): "done",
    ("in_progress", "fail"): "needs_fix",
    ("in_progress", "exhaust"): "stuck",
    ("in_progress", "needs_fix"): "needs_fix",
    ("done", "needs_fix"): "needs_fix",
    ("stuck", "reset"): "needs_fix",
    ("needs_fix", "reset"): "needs_fix",
    ("pending", "lock"): "locked",
    ("locked", "unlock"): "pending",
    ("in_progress", "release"): "pending",
    ("in_progress", "await_review"): "in_progress",
    ("in_progress", "approve"): "done",
    ("in_progress", "reject"): "needs_fix",
    ("done", "reprove"): "in_progress",
    ("in_progress", "restore"): "done",
    ("done", "reopen"): "pending",
}

PAIRS = list(itertools.product(MilestoneStatus, Action))


@pytest.mark.parametrize(("status", "action"), PAIRS, ids=[f"{s.name} => {a.name}" for s, a in PAIRS])
def test_every_pair(status: MilestoneStatus, action: Action) -> None:
    key = (status.value, action.value)
    if key in EXPECTED:
        assert transition("m", status, action) is MilestoneStatus(EXPECTED[key])
    else:
        with pytest.raises(TransitionError, match=rf"cannot {action.verb} 'm': status is {status.value}") as e:
            transition("m", status, action)
        assert e.value.details["allowed"] == [a.command for a in allowed_actions(status)]
        assert e.value.exit_code == 2


def test_table_has_no_extra_entries() -> None:
    assert {(s.value, a.value) for s, a in TRANSITIONS} == set(EXPECTED)


def test_refusal_lists_allowed_actions() -> None:
    with pytest.raises(TransitionError, match=r"allowed from done: needs-fix$"):
        transition("merge", S.DONE, A.START)
    with pytest.raises(TransitionError, match=r"allowed from pending: start, lock$"):
        transition("merge", S.PENDING, A.APPROVE)
    # finishing a milestone not started says how to start it
    hint = r"^cannot finish 'merge': .* start, lock \(start it first: milepost start merge\)$"
    with pytest.raises(TransitionError, match=hint):
        transition("merge", S.PENDING, A.DONE)


def test_stuck_refusal_points_at_reset() -> None:
    with pytest.raises(TransitionError, match=r"status is stuck; allowed from stuck: reset \(operator"):
        transition("merge", S.STUCK, A.START)


def test_ready_and_blocked_are_never_stored_statuses() -> None:
    assert "ready" not in {s.value for s in MilestoneStatus}
    assert "blocked" not in {s.value for s in MilestoneStatus}

"""Work-item readiness over every combination of what it depends on, against
an independent statement of the precedence; and wait validation."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime

import pytest

from milepost.errors import InvalidValueError
from milepost.graph import Action, ItemState, PlanStatus, Wait, WorkGraph, WorkItem
from milepost.graph.item import Readiness, make_wait, readiness_view

R = Readiness


def dag(kind: str) -> WorkGraph:
    g = WorkGraph()
    if kind == "empty":
        return g
    g.add("a", review=kind == "review", retries=0)
    g.add("b", ["a"])
    if kind == "ready":
        return g
    g.apply("a", Action.START)
    if kind == "in_progress":
        return g
    if kind == "stuck":
        g.record_attempt("a", passed=False)
        return g
    g.record_attempt("a", passed=True)
    if kind == "review":
        return g
    g.apply("b", Action.START)
    g.record_attempt("b", passed=True)
    if kind == "all_done":
        return g
    raise AssertionError(kind)


def held() -> WorkGraph:
    g = WorkGraph()
    g.add("a")
    g.apply("a", Action.LOCK, reason="vendor")
    return g


DAGS = ["empty", "ready", "in_progress", "stuck", "review", "all_done", "held"]
WAITS = [None, "task_result", "operator_input", "timer", "external", "system"]

# The precedence, written out as a table independent of the implementation.
DAG_EXPECT = {
    "empty": (R.RUNNABLE, "planning"),
    "ready": (R.RUNNABLE, "milestone_ready"),
    "in_progress": (R.RUNNABLE, "in_progress"),
    "stuck": (R.BLOCKED, "stuck"),
    "review": (R.WAITING_FOR_OPERATOR, "review"),
    "all_done": (R.RUNNABLE, "awaiting_report"),
    "held": (R.BLOCKED, "held"),
}


def expected(state: str, wait: str | None, blocked: bool, after_open: bool, plan: str, d: str) -> tuple[R, str]:
    if state == "completed":
        return R.COMPLETED, "completed"
    if state == "cancelled":
        return R.CANCELLED, "cancelled"
    if wait is not None:
        return (R.WAITING_FOR_OPERATOR if wait == "operator_input" else R.BLOCKED), f"waiting_{wait}"
    if blocked:
        return R.BLOCKED, "blocked_by"
    if after_open:
        return R.BLOCKED, "after_item"
    if plan == "needs_input":
        return R.WAITING_FOR_OPERATOR, "needs_input"
    return DAG_EXPECT[d]


CASES = list(
    itertools.product(
        ["open", "completed", "cancelled"], WAITS, [False, True], [False, True], ["draft", "ready", "needs_input"], DAGS
    )
)


@pytest.mark.parametrize(("state", "wait", "blocked", "after_open", "plan", "d"), CASES)
def test_readiness_table(state: str, wait: str | None, blocked: bool, after_open: bool, plan: str, d: str) -> None:
    g = held() if d == "held" else dag(d)
    waits = [Wait(kind=wait, resource="r", reason="because", since=datetime.now(UTC))] if wait else []
    item = WorkItem(
        id=1,
        agent="default",
        objective="o",
        state=ItemState(state),
        plan_status=PlanStatus(plan),
        waits=waits,
        blocked_by="the vendor" if blocked else None,
        after=7 if after_open else None,
        milestones=list(g),
    )
    view = readiness_view(item, g, after_open=after_open)
    assert (view.readiness, view.state) == expected(state, wait, blocked, after_open, plan, d)
    assert view.reason


def test_wait_precedence_between_kinds() -> None:
    g = dag("ready")
    now = datetime.now(UTC)
    item = WorkItem(
        id=1,
        agent="a",
        objective="o",
        waits=[Wait(kind=k, resource="r", reason=k, since=now) for k in ("system", "timer", "task_result")],
        milestones=list(g),
    )
    assert readiness_view(item, g).state == "waiting_task_result"


@pytest.mark.parametrize(
    ("kind", "resource", "deadline", "pattern"),
    [
        ("task_result", None, None, r"a task_result wait needs --resource"),
        ("external", None, None, r"an? external wait needs --resource"),
        ("timer", None, None, r"a timer wait needs --until TIME"),
        ("timer", None, datetime(2026, 12, 1, 9, 0), r"has no zone"),
        ("nap", None, None, r"unknown wait kind 'nap': use one of task_result, operator_input"),
    ],
)
def test_wait_validation(kind: str, resource: str | None, deadline: datetime | None, pattern: str) -> None:
    with pytest.raises(InvalidValueError, match=pattern):
        make_wait(kind, "why", resource, deadline, datetime.now(UTC))


def test_wait_needs_a_reason() -> None:
    with pytest.raises(InvalidValueError, match=r"needs a reason"):
        make_wait("operator_input", "  ", None, None, datetime.now(UTC))

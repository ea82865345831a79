from __future__ import annotations

import pytest

from milepost.errors import (
    BlockedError,
    BudgetSpentError,
    CycleError,
    DuplicateNameError,
    InvalidNameError,
    InvalidValueError,
    NotFoundError,
    SelfDependencyError,
    TransitionError,
    UnknownDependencyError,
)
from milepost.graph import Action, GateCommand, Milestone, MilestoneStatus, WorkGraph, validate_milestones

S = MilestoneStatus


def refactor() -> WorkGraph:
    """The Work Graph seed's refactor: understand A, B, C -> extract -> merge -> test -> commit."""
    g = WorkGraph()
    for x in "abc":
        g.add(f"analyze-{x}")
    for x in "abc":
        g.add(f"extract-{x}", [f"analyze-{x}"])
    g.add("merge", ["extract-a", "extract-b", "extract-c"])
    g.add("test", ["merge"])
    g.add("commit", ["test"])
    return g


def finish(g: WorkGraph, name: str) -> None:
    g.apply(name, Action.START)
    g.apply(name, Action.DONE)


def test_ids_follow_creation_order() -> None:
    g = refactor()
    assert [m.id for m in g] == list(range(1, 10))
    assert g.get("merge").deps == ["extract-a", "extract-b", "extract-c"]


def test_next_ready_is_lowest_id_and_follows_progress() -> None:
    g = refactor()
    assert g.next_ready().name == "analyze-a"
    assert [m.name for m in g.ready()] == ["analyze-a", "analyze-b", "analyze-c"]
    finish(g, "analyze-a")
    # extract-a (id 4) is ready now, but analyze-b (id 2) is lower.
    assert g.next_ready().name == "analyze-b"
    assert "extract-a" in [m.name for m in g.ready()]


def test_blocked_lists_deps_not_done() -> None:
    g = refactor()
    finish(g, "analyze-a")
    finish(g, "extract-a")
    blocked = dict((m.name, [d.name for d in ds]) for m, ds in g.blocked())
    assert blocked["merge"] == ["extract-b", "extract-c"]
    assert "extract-a" not in blocked


def test_start_blocked_names_deps_and_statuses() -> None:
    g = refactor()
    finish(g, "analyze-b")
    g.apply("analyze-c", Action.START)
    with pytest.raises(
        BlockedError, match=r"cannot start 'merge': blocked by extract-a \(pending\), extract-b \(pending\)"
    ):
        g.apply("merge", Action.START)


def test_failing_gate_then_stuck_with_budget() -> None:
    g = WorkGraph()
    g.add("x", retries=1)
    g.apply("x", Action.START)
    ch = g.record_attempt("x", passed=False, reason="exit 1")
    assert ch.after.status is S.NEEDS_FIX and ch.after.attempts == 1
    assert g.next_ready().name == "x"  # needs_fix with budget left is ready
    g.apply("x", Action.START)
    ch = g.record_attempt("x", passed=False, reason="exit 1")
    assert ch.after.status is S.STUCK and ch.after.attempts == 2
    assert g.next_ready() is None
    assert "stuck: x" in g.why_nothing_ready()
    ch2 = g.apply("x", Action.RESET, reason="flaky disk fixed")
    assert ch2[0].after.status is S.NEEDS_FIX and ch2[0].after.attempts == 0
    assert g.next_ready().name == "x"


def test_a_final_failure_is_stuck_with_budget_left() -> None:
    from milepost.graph import steps

    g = WorkGraph()
    g.add("x", retries=3)
    g.apply("x", Action.START)
    ch = steps.record_attempt(g.get("x"), False, "budget: spent", final=True)
    assert ch.after.status is S.STUCK and ch.after.attempts == 1 and ch.action is Action.EXHAUST
    assert ch.after.reason == "budget: spent" and ch.after.retry_at is None


def test_reason_required() -> None:
    g = WorkGraph()
    g.add("x")
    with pytest.raises(InvalidValueError, match=r"lock 'x' needs a reason"):
        g.apply("x", Action.LOCK)
    with pytest.raises(InvalidValueError, match=r"needs a reason"):
        g.apply("x", Action.LOCK, reason="   ")


def test_needs_fix_without_budget_cannot_start() -> None:
    g = WorkGraph()
    g.add("x", retries=0)
    g.apply("x", Action.START)
    g.record_attempt("x", passed=True)
    g.apply("x", Action.NEEDS_FIX, reason="review found a bug")
    assert g.next_ready() is None
    with pytest.raises(BudgetSpentError, match=r"retry budget spent \(1 of 1 attempts\)"):
        g.apply("x", Action.START)


def test_reopening_a_done_milestone_reopens_done_dependents() -> None:
    g = refactor()
    for n in ("analyze-a", "extract-a", "analyze-b", "extract-b", "analyze-c", "extract-c", "merge"):
        finish(g, n)
    changes = g.apply("extract-a", Action.NEEDS_FIX, reason="interface leaks")
    # The dependents are not at fault: they wait behind it, pending (blocked), with a fresh budget.
    assert [(c.after.name, c.after.status, c.action) for c in changes] == [
        ("extract-a", S.NEEDS_FIX, Action.NEEDS_FIX),
        ("merge", S.PENDING, Action.REOPEN),
    ]
    assert changes[1].after.attempts == 0
    assert g.view("merge") == "blocked"
    assert "extract-a" in (changes[1].reason or "")
    # No done milestone stands on an undone dep.
    for m in g:
        if m.status is S.DONE:
            assert all(g.get(d).status is S.DONE for d in m.deps)


def test_reopen_refused_while_dependent_in_progress() -> None:
    g = refactor()
    finish(g, "analyze-a")
    g.apply("extract-a", Action.START)
    with pytest.raises(TransitionError, match=r"cannot reopen 'analyze-a': dependents in progress: extract-a"):
        g.apply("analyze-a", Action.NEEDS_FIX, reason="x")


def test_lock_and_hypothesis_are_not_ready() -> None:
    g = WorkGraph()
    g.add("a")
    g.add("b", hypothesis=True)
    g.apply("a", Action.LOCK, reason="waiting for the vendor")
    assert g.next_ready() is None
    assert "locked: a" in g.why_nothing_ready() and "unconfirmed: b" in g.why_nothing_ready()
    g.apply("b", Action.CONFIRM)
    assert g.next_ready().name == "b"
    g.apply("a", Action.UNLOCK, reason="vendor answered")
    assert g.next_ready().name == "a"


@pytest.mark.parametrize(
    ("name", "deps", "exc", "pattern"),
    [
        ("Bad Name", [], InvalidNameError, r"invalid milestone name 'Bad Name': use 1-64 characters"),
        ("9lives", [], InvalidNameError, r"starting with a letter"),
        ("analyze-a", [], DuplicateNameError, r"milestone 'analyze-a' already exists \(id 1\)"),
        ("z", ["z"], SelfDependencyError, r"milestone 'z' lists itself in its deps"),
        ("z", ["nope"], UnknownDependencyError, r"milestone 'z' depends on unknown milestone 'nope'; known: analyze-a"),
    ],
)
def test_add_refusals(name: str, deps: list[str], exc: type[Exception], pattern: str) -> None:
    g = WorkGraph()
    g.add("analyze-a")
    with pytest.raises(exc, match=pattern):
        g.add(name, deps)
    assert len(g) == 1


@pytest.mark.parametrize(("field", "value"), [("retries", -1), ("timeout", -5.0), ("timeout", 0)])
def test_negative_numbers_refused(field: str, value: float) -> None:
    g = WorkGraph()
    with pytest.raises(InvalidValueError, match=rf"invalid {field} {value!r} for milestone 'x'"):
        g.add("x", **{field: value})  # type: ignore[arg-type]


def test_cycle_reported_as_path() -> None:
    ms = [
        Milestone(id=1, name="a", deps=["c"]),
        Milestone(id=2, name="b", deps=["a"]),
        Milestone(id=3, name="c", deps=["b"]),
        Milestone(id=4, name="d"),
    ]
    with pytest.raises(CycleError, match=r"cycle: a -> c -> b -> a \(each needs the next\)"):
        validate_milestones(ms)


def test_unknown_milestone() -> None:
    with pytest.raises(NotFoundError, match=r"no milestone 'x' in this work item"):
        WorkGraph().get("x")


def test_layers_bottlenecks_critical_path() -> None:
    g = refactor()
    assert [[m.name for m in layer] for layer in g.layers()] == [
        ["analyze-a", "analyze-b", "analyze-c"],
        ["extract-a", "extract-b", "extract-c"],
        ["merge"],
        ["test"],
        ["commit"],
    ]
    assert [m.name for m in g.critical_path()] == ["analyze-a", "extract-a", "merge", "test", "commit"]
    top = g.bottlenecks(2)
    assert [(m.name, n) for m, n in top] == [("analyze-a", 4), ("analyze-b", 4)]


def test_the_critical_path_weighs_the_gates_last_durations_when_known() -> None:
    g = refactor()
    by_count = ["analyze-a", "extract-a", "merge", "test", "commit"]
    assert g.path_weights({}) is None and [m.name for m in g.critical_path({})] == by_count
    # The slow gates are on branch C: the path goes through them, not through the lowest ids.
    slow_c = {"analyze-a": 1.0, "analyze-b": 1.0, "analyze-c": 30.0, "extract-a": 2.0, "extract-c": 40.0}
    assert [m.name for m in g.critical_path(slow_c)] == ["analyze-c", "extract-c", "merge", "test", "commit"]
    # On equal time the longer chain: merge, test and commit have no gate (0 s) and still belong to it.
    assert g.path_weights(slow_c)["merge"] == 0.0  # type: ignore[index]
    gate = [GateCommand(name="gate", run="true")]
    chain = WorkGraph(
        [
            Milestone(id=1, name="a", gate=gate),
            Milestone(id=2, name="b", deps=["a"], gate=gate),
            Milestone(id=3, name="slow", gate=gate),
            Milestone(id=4, name="c", deps=["b"], gate=gate),
        ]
    )
    assert [m.name for m in chain.critical_path()] == ["a", "b", "c"]
    # A gate's time outweighs a longer chain of quick ones.
    assert [m.name for m in chain.critical_path({"a": 1.0, "b": 2.0, "c": 1.0, "slow": 10.0})] == ["slow"]
    # Not run yet: a gated milestone counts as the median of the known ones; unknown names are ignored.
    weights = chain.path_weights({"a": 1.0, "b": 3.0, "slow": 10.0, "gone": 99.0})
    assert weights == {"a": 1.0, "b": 3.0, "slow": 10.0, "c": 3.0}
    assert [m.name for m in chain.critical_path({"a": 4.0, "b": 5.0, "slow": 12.0})] == ["a", "b", "c"]


def test_remove() -> None:
    g = refactor()
    with pytest.raises(TransitionError, match=r"cannot remove 'merge': test depends on it; remove it first"):
        g.remove("merge")
    g.remove("commit")
    assert "commit" not in g
    g.add("commit", ["test"])
    assert g.get("commit").id == 9


def test_large_graph_next_ready_loop_is_incremental(monkeypatch: pytest.MonkeyPatch) -> None:
    """Not a timing test: counts work. Driving a 20,000-milestone chain-of-fans
    through next_ready pushes and pops each milestone's heap entry a bounded
    number of times (a rescan per pick would be n^2 / 2 = 200 million)."""
    import heapq

    import milepost.graph.dag as dag

    ops = {"push": 0, "pop": 0}

    class CountingHeap:
        @staticmethod
        def heappush(heap: list[tuple[int, str]], entry: tuple[int, str]) -> None:
            ops["push"] += 1
            heapq.heappush(heap, entry)

        @staticmethod
        def heappop(heap: list[tuple[int, str]]) -> tuple[int, str]:
            ops["pop"] += 1
            return heapq.heappop(heap)

        heapify = staticmethod(heapq.heapify)

    monkeypatch.setattr(dag, "heapq", CountingHeap)
    g = WorkGraph()
    n = 20_000
    g.add("m0")
    for i in range(1, n):
        g.add(f"m{i}", [f"m{(i - 1) // 2}"])
    built = dict(ops)
    order = []
    while (m := g.next_ready()) is not None:
        order.append(m.id)
        g.apply(m.name, Action.START)
        g.apply(m.name, Action.DONE)
    assert order == list(range(1, n + 1))
    assert len(g._heap) == 0
    # Each milestone enters the heap when it becomes ready, and leaves it once.
    assert built["push"] <= 1 and ops["push"] <= n + 1 and ops["pop"] <= n + 1, ops


def test_review_gate_approve_and_reject() -> None:
    g = WorkGraph()
    g.add("design", review=True, retries=1)
    g.add("build", ["design"])
    g.apply("design", Action.START)
    ch = g.record_attempt("design", passed=True)
    assert ch.after.status is S.IN_PROGRESS and ch.after.awaiting_review and ch.action is Action.AWAIT_REVIEW
    assert g.next_ready() is None and "waiting for review: design" in g.why_nothing_ready()
    with pytest.raises(TransitionError, match=r"cannot finish 'design': its gate passed and it waits for review"):
        g.apply("design", Action.DONE)
    with pytest.raises(InvalidValueError, match=r"reject 'design' needs a reason"):
        g.review("design", approve=False)
    ch = g.review("design", approve=False, reason="too big")
    assert ch.after.status is S.NEEDS_FIX and not ch.after.awaiting_review
    g.apply("design", Action.START)
    g.record_attempt("design", passed=True)
    ch = g.review("design", approve=False, reason="still too big")
    assert ch.after.status is S.STUCK  # the rejected attempt was the last of the budget
    with pytest.raises(TransitionError, match=r"cannot approve 'build'"):
        g.review("build", approve=True)


def test_review_approve_makes_done() -> None:
    g = WorkGraph()
    g.add("design", review=True)
    g.apply("design", Action.START)
    g.record_attempt("design", passed=True)
    assert g.review("design", approve=True).after.status is S.DONE


def test_hold_keeps_a_milestone_out_of_next_ready() -> None:
    g = WorkGraph()
    g.add("a")
    g.add("b")
    g.hold("a")
    assert g.next_ready().name == "b"
    g.hold("b")
    assert g.next_ready() is None and "retry delayed: a, b" in g.why_nothing_ready()
    g.unhold("a")
    assert g.next_ready().name == "a"


def test_release_returns_a_claim_without_spending_budget() -> None:
    g = WorkGraph()
    g.add("a")
    g.apply("a", Action.START)
    ch = g.apply("a", Action.RELEASE, reason="driver stopped")
    assert ch[0].after.status is S.PENDING and ch[0].after.attempts == 0
    assert g.next_ready().name == "a"

"""Property tests: random DAGs driven by random action sequences keep the
invariants, and the incremental readiness always equals a brute-force scan."""

from __future__ import annotations

import random

from hypothesis import given, settings
from hypothesis import strategies as st

from milepost.errors import MilepostError
from milepost.graph import Action, MilestoneStatus, WorkGraph

S = MilestoneStatus


@st.composite
def dags(draw: st.DrawFn) -> WorkGraph:
    n = draw(st.integers(min_value=1, max_value=25))
    g = WorkGraph()
    for i in range(n):
        deps = draw(st.lists(st.integers(min_value=0, max_value=max(i - 1, 0)), max_size=3)) if i else []
        g.add(f"m{i}", [f"m{d}" for d in deps], retries=draw(st.integers(min_value=0, max_value=2)))
    return g


STEP = st.tuples(
    st.sampled_from(["start", "pass", "fail", "needs_fix", "reset", "lock", "unlock", "next"]),
    st.integers(min_value=0, max_value=24),
)


def brute_ready(g: WorkGraph) -> list[str]:
    out = []
    for m in g:
        ok_status = m.status is S.PENDING or (m.status is S.NEEDS_FIX and m.attempts < 1 + m.retries)
        if ok_status and all(g.get(d).status is S.DONE for d in m.deps):
            out.append(m.name)
    return out


def check_invariants(g: WorkGraph) -> None:
    for m in g:
        if m.status is S.DONE:
            assert all(g.get(d).status is S.DONE for d in m.deps), f"{m.name} done on an undone dep"
        assert 0 <= m.attempts <= 1 + m.retries
        if m.status is S.STUCK:
            assert m.attempts == 1 + m.retries
    ready = brute_ready(g)
    nxt = g.next_ready()
    assert (nxt.name if nxt else None) == (ready[0] if ready else None)
    assert [m.name for m in g.ready()] == ready
    fresh = WorkGraph(list(g))
    assert [m.name for m in fresh.ready()] == ready


def _act(g: WorkGraph, op: str, name: str) -> None:
    if op == "start":
        g.apply(name, Action.START)
    elif op in ("pass", "fail"):
        if g.get(name).status is S.IN_PROGRESS:
            g.record_attempt(name, passed=op == "pass", reason=op)
    elif op == "needs_fix":
        g.apply(name, Action.NEEDS_FIX, reason="second check")
    elif op == "reset":
        g.apply(name, Action.RESET, reason="operator")
    elif op == "lock":
        g.apply(name, Action.LOCK, reason="hold")
    elif op == "unlock":
        g.apply(name, Action.UNLOCK, reason="go")
    elif op == "next" and (m := g.next_ready()) is not None:
        g.apply(m.name, Action.START)


@settings(max_examples=150, deadline=None)
@given(dags(), st.lists(STEP, max_size=80))
def test_random_actions_keep_invariants(g: WorkGraph, steps: list[tuple[str, int]]) -> None:
    check_invariants(g)
    names = [m.name for m in g]
    for op, idx in steps:
        name = names[idx % len(names)]
        before = [m.model_dump() for m in g]
        try:
            _act(g, op, name)
        except MilepostError:
            assert [m.model_dump() for m in g] == before, "a refused action changed the graph"
        check_invariants(g)


@settings(max_examples=150, deadline=None)
@given(
    dags(),
    st.lists(st.one_of(STEP, st.tuples(st.sampled_from(["add", "remove"]), st.integers(0, 24))), max_size=60),
)
def test_a_loaded_graph_takes_new_milestones_removals_and_actions(g: WorkGraph, steps: list[tuple[str, int]]) -> None:
    """A graph made from milestones (as the store loads one: its dependents'
    lists are made on first use) keeps its counters right through added and
    removed milestones and every action."""
    g = WorkGraph(list(g))
    added = 0
    for op, idx in steps:
        names = [m.name for m in g]
        if not names:  # everything removed: start again from one milestone
            g.add(f"new{added}", [])
            added += 1
            continue
        name = names[idx % len(names)]
        before = [m.model_dump() for m in g]
        try:
            if op == "add":
                g.add(f"new{added}", [name])
                added += 1
            elif op == "remove":
                g.remove(name)
            else:
                _act(g, op, name)
        except MilepostError:
            assert [m.model_dump() for m in g] == before, "a refused action changed the graph"
        if len(g):
            check_invariants(g)
        for m in g:
            assert g.dependents(m.name) == sorted((x.name for x in g if m.name in x.deps), key=lambda n: g.get(n).id), (
                "dependents lists out of step"
            )


@settings(max_examples=60, deadline=None)
@given(dags())
def test_driving_by_next_ready_finishes_everything_in_lowest_id_order(g: WorkGraph) -> None:
    picked: list[int] = []
    while (m := g.next_ready()) is not None:
        assert m.name == brute_ready(g)[0]
        picked.append(m.id)
        g.apply(m.name, Action.START)
        g.record_attempt(m.name, passed=True)
    assert g.all_done()
    assert sorted(picked) == [m.id for m in g]


def _reference_verdict(ms: list[tuple[str, list[str]]]) -> str:
    """What a set of milestones is, found the slow way: the first problem's
    kind in milestone_problems' order, else whether a topological order exists."""
    import re

    names = [n for n, _ in ms]
    for n in names:
        if not re.fullmatch(r"[a-z][a-z0-9._-]{0,63}", n) or names.count(n) > 1:
            return "name"
    for n, deps in ms:
        if n in deps or any(d not in names for d in deps):
            return "deps"
    done: set[str] = set()
    while len(done) < len(ms):
        free = [n for n, deps in ms if n not in done and all(d in done for d in deps)]
        if not free:
            return "cycle"
        done.update(free)
    return "ok"


@settings(max_examples=400, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["a", "b", "c", "d", "e", "B", "1x"]),
            st.lists(st.sampled_from(["a", "b", "c", "d", "e", "z"]), max_size=3),
        ),
        max_size=6,
    )
)
def test_validation_of_a_set_agrees_with_a_brute_force_reference(ms: list[tuple[str, list[str]]]) -> None:
    """The one-look path (every dep listed earlier) and the full checks give
    the verdict a brute-force search gives, on sets in any order."""
    from milepost.graph import Milestone, validate_milestones
    from milepost.graph.errors import CycleError, DuplicateNameError, InvalidNameError

    items = [Milestone(id=i, name=n, deps=list(dict.fromkeys(d))) for i, (n, d) in enumerate(ms, start=1)]
    expected = _reference_verdict([(m.name, m.deps) for m in items])
    try:
        validate_milestones(items)
        got = "ok"
    except (InvalidNameError, DuplicateNameError):
        got = "name"
    except CycleError:
        got = "cycle"
    except MilepostError:
        got = "deps"
    assert got == expected, [(m.name, m.deps) for m in items]


@settings(max_examples=3, deadline=None)
@given(st.builds(lambda x: (random.random(), x)[1], st.integers()))  # (a Prefect thread's retry jitter, in effect)
def test_the_global_random_state_moving_while_an_example_is_drawn_fails_no_property_test(x: int) -> None:
    """pyproject's filterwarnings ignores Hypothesis's one warning about it (see there), for every module."""
    assert isinstance(x, int)

"""Inputs in the pure domain: pattern rules, plan files (defaults, export),
the stale view, and the re-proof's moves (reprove, restore, reopen)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from milepost.errors import BlockedError, InvalidValueError, PlanFileError, TransitionError
from milepost.graph import Action, MilestoneStatus, WorkGraph
from milepost.graph.models import GateCommand, WorkItem, check_inputs
from milepost.graph.plan import Plan, plan_from_item
from milepost.planfile import parse_plan

S = MilestoneStatus
TRUE = GateCommand(run="true")


@pytest.mark.parametrize(
    ("pattern", "problem"),
    [
        ("/etc/passwd", "is absolute"),
        ("~/notes", "is absolute"),
        ("../other/x.py", r"escapes the workspace \('\.\.'\)"),
        ("src/../../x", "escapes the workspace"),
        ("!", "negates nothing"),
        ("#comment", "starts with '#'"),
        ("src\\", "ends with an unescaped backslash"),
        ("", "is empty"),
        ("a\nb", "contains a NUL or line-break"),
    ],
)
def test_bad_patterns_are_refused_naming_the_milestone_and_the_pattern(pattern: str, problem: str) -> None:
    with pytest.raises(InvalidValueError, match=rf"invalid input pattern .* of milestone 'lint': it {problem}"):
        check_inputs([pattern], "milestone 'lint'")


def test_good_patterns_are_normalised_and_deduplicated() -> None:
    assert check_inputs(["./src/**", "src/**", "!**/*.md", "tests/", "a\\#b", "././setup.py", "./build/"], "m") == [
        "src/**",
        "!**/*.md",
        "tests/",
        "a\\#b",
        "./setup.py",  # a name anchored at the root keeps its ./ (without it, it matches at any depth)
        "./build/",
    ]


def test_a_milestone_without_a_gate_cannot_have_inputs() -> None:
    g = WorkGraph()
    with pytest.raises(InvalidValueError, match=r"milestone 'a' has inputs but no gate"):
        g.add("a", inputs=["src/**"])
    m = g.add("b", gate=[], inputs=[])
    assert m.inputs == [] and not m.has_inputs


PLAN = """
objective: inputs
defaults: {inputs: ['src/**', 'tests/**']}
milestones:
  - {name: a, gate: 'true'}
  - {name: b, gate: 'true', inputs: ['src/b.py'], cache: false, flaky: true}
  - {name: c, gate: 'true', inputs: []}
  - {name: note}
"""


def test_own_inputs_replace_the_defaults_and_gateless_milestones_take_none() -> None:
    ms = {m.name: m for m in parse_plan(PLAN).to_milestones()}
    assert ms["a"].inputs == ["src/**", "tests/**"] and ms["a"].cache and not ms["a"].flaky
    assert ms["b"].inputs == ["src/b.py"] and not ms["b"].cache and ms["b"].flaky
    assert ms["c"].inputs == []
    assert ms["note"].inputs == []


def test_export_writes_inputs_back_so_applying_again_gives_the_same() -> None:
    plan = parse_plan(PLAN)
    item = WorkItem(
        id=1,
        agent="a",
        objective="inputs",
        defaults={"inputs": ["src/**", "tests/**"]},
        milestones=plan.to_milestones(),
    )
    data = plan_from_item(item)
    assert data["defaults"] == {"inputs": ["src/**", "tests/**"]}
    entries = {m["name"]: m for m in data["milestones"]}
    assert "inputs" not in entries["a"] and entries["b"]["inputs"] == ["src/b.py"] and entries["c"]["inputs"] == []
    assert entries["b"]["cache"] is False and entries["b"]["flaky"] is True
    again = Plan.model_validate(data).to_milestones()
    assert [(m.name, m.inputs, m.cache, m.flaky) for m in again] == [
        (m.name, m.inputs, m.cache, m.flaky) for m in plan.to_milestones()
    ]


def test_plan_file_errors_name_the_line_and_the_pattern() -> None:
    text = "objective: x\nmilestones:\n  - name: a\n    gate: 'true'\n    inputs: ['../up']\n"
    with pytest.raises(PlanFileError, match=r"<plan>:5: milestone 'a': invalid inputs\[0\]: escapes the workspace"):
        parse_plan(text)
    with pytest.raises(InvalidValueError, match=r"<plan>:3: milestone 'a' has inputs but no gate"):
        parse_plan("objective: x\nmilestones:\n  - name: a\n    inputs: ['src/**']\n")


def chain() -> WorkGraph:
    g = WorkGraph()
    g.add("a", gate=[TRUE], inputs=["a.py"])
    g.add("b", ["a"], gate=[TRUE], inputs=["b.py"])
    g.add("c", ["b"], gate=[TRUE])
    for n in ("a", "b", "c"):
        g.apply(n, Action.START)
        g.record_attempt(n, passed=True, fingerprint=f"fp-{n}")
    return g


def test_stale_is_a_view_of_done_milestones() -> None:
    g = chain()
    assert g.get("a").fingerprint == "fp-a" and g.get("a").attempts == 1
    g.mark_stale(["a", "nope"])
    assert g.view("a") == "stale" and g.stale() == ["a"] and g.is_stale("a")
    assert g.get("a").status is S.DONE  # stored status unchanged
    assert g.next_ready() is None  # next is not about stale milestones: drive and verify are
    g.mark_stale([])
    assert g.view("a") == "done"


def test_a_passing_reproof_spends_no_budget_and_refreshes_the_fingerprint() -> None:
    g = chain()
    g.mark_stale(["a"])
    [change] = g.apply("a", Action.REPROVE)
    assert change.after.status is S.IN_PROGRESS and not g.is_stale("a")
    assert g.view("b") == "done"  # built on it, untouched while it runs
    g.record_attempt("a", passed=True, free=True, fingerprint="fp-a2")
    assert (g.get("a").status, g.get("a").attempts, g.get("a").fingerprint) == (S.DONE, 1, "fp-a2")


def test_a_failing_reproof_starts_a_fresh_budget_and_reopens_what_was_built_on_it_as_pending() -> None:
    g = chain()
    g.apply("a", Action.REPROVE)
    g.record_attempt("a", passed=False, reason="exit 1", free=True, fingerprint="fp-bad")
    reopened = g.reopen_dependents("a", "its re-proof failed: exit 1")
    assert (g.get("a").status, g.get("a").attempts, g.get("a").fingerprint) == (S.NEEDS_FIX, 1, "fp-bad")
    assert [(c.after.name, c.after.status, c.action) for c in reopened] == [
        ("b", S.PENDING, Action.REOPEN),
        ("c", S.PENDING, Action.REOPEN),
    ]
    assert all(g.get(n).attempts == 0 and g.get(n).fingerprint is None for n in ("b", "c"))
    assert g.view("b") == "blocked" and g.view("c") == "blocked"


AT = datetime(2026, 12, 2, 7, 0, tzinfo=UTC)


def test_each_break_after_a_pass_gets_its_own_budget() -> None:
    """A milestone that passed on the last attempt of its budget, then broke
    by an edit, is not stuck at the first failure of its re-proof; its round
    of retries is new. Failing again in that round spends it as any round."""
    g = WorkGraph()
    g.add("a", gate=[TRUE], inputs=["a.py"], retries=1, retry_delay=10)  # two attempts a round
    g.apply("a", Action.START)
    g.record_attempt("a", passed=False, reason="exit 1")
    g.apply("a", Action.START)
    g.record_attempt("a", passed=True, fingerprint="fp-1")
    assert (g.get("a").status, g.get("a").attempts) == (S.DONE, 2)  # passed on its last attempt
    for _ in range(2):  # broken and fixed twice: each break is a first failure
        g.apply("a", Action.REPROVE)
        g.record_attempt("a", passed=False, reason="exit 1", free=True, at=AT)
        assert (g.get("a").status, g.get("a").attempts) == (S.NEEDS_FIX, 1)
        assert g.get("a").retry_at == AT + timedelta(seconds=10)  # the round's first delay, not its third
        g.apply("a", Action.START)
        g.record_attempt("a", passed=True, fingerprint="fp-2")
        assert (g.get("a").status, g.get("a").attempts) == (S.DONE, 2)
    g.apply("a", Action.REPROVE)
    g.record_attempt("a", passed=False, reason="exit 1", free=True)
    g.apply("a", Action.START)
    g.record_attempt("a", passed=False, reason="exit 1")
    assert (g.get("a").status, g.get("a").attempts) == (S.STUCK, 2)  # two failures in one round


def test_an_interrupted_reproof_leaves_the_milestone_done() -> None:
    g = chain()
    g.apply("a", Action.REPROVE)
    [change] = g.apply("a", Action.RESTORE, reason="re-proof interrupted")
    assert change.after.status is S.DONE and change.after.fingerprint == "fp-a"


def test_reproof_needs_a_gate_and_done_deps() -> None:
    g = WorkGraph()
    g.add("a", gate=[TRUE])
    g.add("note", ["a"])
    g.apply("a", Action.START)
    g.record_attempt("a", passed=True)
    g.apply("note", Action.START)
    g.apply("note", Action.DONE)
    with pytest.raises(TransitionError, match=r"cannot re-prove 'note': it has no gate"):
        g.apply("note", Action.REPROVE)
    g2 = chain()
    g2.apply("a", Action.REPROVE)
    with pytest.raises(BlockedError, match=r"cannot re-prove 'b': its deps are not done: a \(in_progress\)"):
        g2.apply("b", Action.REPROVE)


def test_reset_and_a_hand_reopen_forget_the_failure_they_stood_on() -> None:
    g = chain()
    g.apply("c", Action.NEEDS_FIX, reason="review found a bug")
    assert g.get("c").fingerprint is None
    g.apply("a", Action.REPROVE)
    g.record_attempt("a", passed=False, reason="exit 1", free=True, fingerprint="fp-bad")
    g.apply("a", Action.RESET, reason="fixed the machine")
    assert g.get("a").fingerprint is None and g.get("a").attempts == 0

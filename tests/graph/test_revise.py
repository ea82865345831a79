"""A plan revision worked out without I/O (milepost/graph/revise.py): what is
added, removed and changed, what is proven again, what a running attempt
refuses; and a scaffold merged again with an item's plan
(milepost/scaffold/rescaffold.py)."""

from __future__ import annotations

from typing import Any

from milepost.graph.dag import WorkGraph
from milepost.graph.models import GateCommand, Milestone
from milepost.graph.plan import Plan
from milepost.graph.revise import revise, running_problems
from milepost.graph.status import MilestoneStatus
from milepost.scaffold.rescaffold import merge

S = MilestoneStatus


def gate(run: str) -> list[GateCommand]:
    return [GateCommand(name="gate", run=run)]


def stored(*ms: tuple[str, list[str], S, int]) -> WorkGraph:
    return WorkGraph(
        [
            Milestone(id=i, name=n, deps=d, status=s, attempts=a, gate=gate("true"))
            for i, (n, d, s, a) in enumerate(ms, start=1)
        ]
    )


def plan(*entries: dict[str, Any]) -> list[Milestone]:
    return Plan.model_validate({"objective": "o", "milestones": list(entries)}).to_milestones()


def test_unchanged_milestones_keep_their_state_and_new_ones_take_the_next_ids() -> None:
    old = stored(("a", [], S.DONE, 1), ("b", ["a"], S.NEEDS_FIX, 1))
    out = revise(
        old,
        plan(
            {"name": "c", "gate": "true"}, {"name": "a", "gate": "true"}, {"name": "b", "deps": ["a"], "gate": "true"}
        ),
    )
    assert [m.name for m in out.added] == ["c"] and out.added[0].id == 3
    assert (out.edits, out.removed, out.moves, out.problems) == ([], [], [], [])
    assert out.graph.get("a").status is S.DONE and out.graph.get("b").attempts == 1


def test_a_changed_gate_reopens_the_done_milestone_and_what_is_built_on_it() -> None:
    old = stored(("a", [], S.DONE, 1), ("b", ["a"], S.DONE, 2), ("c", [], S.DONE, 1))
    out = revise(
        old,
        plan(
            {"name": "a", "gate": "make a"},
            {"name": "b", "deps": ["a"], "gate": "true", "acceptance": "words"},
            {"name": "c", "gate": "true"},
        ),
    )
    assert [(e.name, [f.field for f in e.fields], e.reprove) for e in out.edits] == [
        ("a", ["gate"], True),
        ("b", ["acceptance"], False),
    ]
    moved = {c.after.name: (c.before.status, c.after.status, c.after.attempts) for c in out.moves}
    assert moved == {"a": (S.DONE, S.PENDING, 0), "b": (S.DONE, S.PENDING, 0)}
    assert out.graph.get("c").status is S.DONE and out.graph.get("b").acceptance == "words"
    assert out.graph.next_ready().name == "a"  # type: ignore[union-attr]


def test_a_new_gate_gives_a_stuck_milestone_a_fresh_budget_and_a_reordered_deps_list_is_no_reproof() -> None:
    old = stored(("a", [], S.DONE, 1), ("x", [], S.DONE, 1), ("b", ["a", "x"], S.STUCK, 3))
    out = revise(
        old,
        plan(
            {"name": "a", "gate": "true"},
            {"name": "x", "gate": "true"},
            {"name": "b", "deps": ["x", "a"], "gate": "pytest -q"},
        ),
    )
    assert [(c.after.name, c.after.status, c.after.attempts) for c in out.moves] == [("b", S.NEEDS_FIX, 0)]
    out = revise(
        old,
        plan(
            {"name": "a", "gate": "true"},
            {"name": "x", "gate": "true"},
            {"name": "b", "deps": ["x", "a"], "gate": "true"},
        ),
    )
    assert out.edits[0].reprove is False and out.moves == []


def test_a_running_attempt_refuses_every_change_that_touches_it_in_one_pass() -> None:
    old = stored(("a", [], S.DONE, 1), ("b", ["a"], S.IN_PROGRESS, 1), ("c", [], S.IN_PROGRESS, 2))
    out = revise(
        old, plan({"name": "a", "gate": "make a"}, {"name": "b", "deps": ["a"], "gate": "other"}), {"b": "drive@host"}
    )
    assert out.problems == [
        "cannot remove 'c' runs attempt 2: wait until it ends (or stop its drive), then apply again",
        "cannot change gate of 'b' runs attempt 1 by drive@host: wait until it ends, then apply again",
        "cannot re-prove 'a': it would reopen 'b' runs attempt 1 by drive@host; wait until it ends, then apply again",
    ]


def test_a_plan_with_a_cycle_and_an_unknown_dep_still_names_the_running_attempts_it_touches() -> None:
    """running_problems: the refusals of revise() for milestones that make no
    graph (b and x form a cycle, y needs an unknown one), in one pass."""
    old = stored(("a", [], S.DONE, 1), ("b", ["a"], S.IN_PROGRESS, 1), ("c", [], S.IN_PROGRESS, 2))
    new = Plan.model_validate(
        {
            "objective": "o",
            "milestones": [
                {"name": "a", "gate": "make a"},
                {"name": "x", "deps": ["b"]},
                {"name": "b", "deps": ["a", "x"], "gate": "true"},
                {"name": "y", "deps": ["nowhere"]},
            ],
        }
    ).each_milestone()
    assert running_problems(old, new, {"b": "drive@host"}) == [
        "cannot remove 'c' runs attempt 2: wait until it ends (or stop its drive), then apply again",
        "cannot change deps of 'b' runs attempt 1 by drive@host: wait until it ends, then apply again",
        "cannot re-prove 'a': it would reopen 'b' runs attempt 1 by drive@host; wait until it ends, then apply again",
    ]


# -- scaffold again -----------------------------------------------------------------------


def entry(name: str, **fields: Any) -> dict[str, Any]:
    return {"name": name, "gate": f"check {name}", "acceptance": f"{name} ok", **fields}


def test_a_field_edited_by_hand_stays_and_the_rest_follows_the_new_scaffold() -> None:
    base = {"objective": "o", "milestones": [entry("a"), entry("b", deps=["a"]), entry("gone")]}
    current = {
        "objective": "mine",
        "milestones": [entry("a", acceptance="my words"), entry("b", deps=["a"]), entry("gone"), entry("own")],
    }
    new = {"objective": "o2", "milestones": [entry("a", gate="check2 a"), entry("b", deps=["a", "n"]), entry("n")]}
    m = merge(base, current, new)
    names = [e["name"] for e in m.plan["milestones"]]
    assert names == ["a", "b", "n", "own"]  # gone's module was deleted: its milestone goes; own is the user's
    a = m.plan["milestones"][0]
    assert (a["acceptance"], a["gate"]) == ("my words", "check2 a")
    assert m.plan["milestones"][1]["deps"] == ["a", "n"] and m.plan["objective"] == "mine"
    assert m.kept_edits == {"a": ["acceptance"]} and m.kept_milestones == ["own"] and m.notes == []


def test_without_a_record_the_users_values_stay_but_deps_and_inputs() -> None:
    current = {"objective": "o", "milestones": [entry("a", gate="mine", inputs=["x/**"]), entry("old")]}
    new = {"objective": "o", "milestones": [entry("a", inputs=["module:a"], deps=["n"]), entry("n")]}
    m = merge(None, current, new)
    a = m.plan["milestones"][0]
    assert (a["gate"], a["inputs"], a["deps"]) == ("mine", ["module:a"], ["n"])
    assert [e["name"] for e in m.plan["milestones"]] == ["a", "n", "old"]
    assert m.kept_milestones == ["old"] and "remove them by hand" in m.notes[0]

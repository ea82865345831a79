"""``plan apply`` reports every problem of a plan in one pass (issue 32):
field errors, unknown deps, duplicate names and cycles on the known edges,
each at its ``file:line``, capped with a count beyond 50; nothing is created."""

from __future__ import annotations

from pathlib import Path

from tests.conftest import CLI

PLAN = """objective: o
milestones:
  - name: a
    deps: [c]
    retries: lots
  - name: b
    deps: [a, ghost]
  - name: c
    deps: [b]
  - name: b
    gate: echo hi
  - name: d
    bogus: 1
"""


def test_fields_unknown_deps_duplicates_and_cycles_come_in_one_error(cli: CLI, workspace: Path) -> None:
    (workspace / "p.yaml").write_text(PLAN)
    r = cli("plan", "apply", "p.yaml")
    assert r.code == 2 and r.out == "" and r.err.count("\n") == 1
    segments = r.err.removeprefix("milepost: error: ").rstrip("\n").split("; p.yaml:")
    assert [s.split(":", 1)[0] for s in segments[1:]] == ["5", "7", "10", "13"]
    assert segments[0] == "p.yaml:4: milestone deps form a cycle: a -> c -> b -> a (each needs the next)"
    assert "milestone 'a': invalid retries" in segments[1]
    assert "milestone 'b' depends on unknown milestone 'ghost'" in segments[2]
    assert "duplicate milestone name 'b' (entries 2 and 4)" in segments[3]
    assert "milestone 'd': unknown field 'bogus'" in segments[4]
    j = cli("--json", "plan", "apply", "p.yaml")
    kinds = [p["field"] for p in j.data["error"]["problems"]]
    assert kinds == [
        "milestones.0.deps.0",
        "milestones.0.retries",
        "milestones.1.deps.1",
        "milestones.3.name",
        "milestones.4.bogus",
    ]
    assert cli("--json", "item", "list").data["items"] == []  # nothing was created


def test_a_valid_plan_shows_its_unknown_deps_and_its_cycle_together(cli: CLI, workspace: Path) -> None:
    text = "objective: o\nmilestones:\n  - {name: a, deps: [b]}\n  - {name: b, deps: [a, zz]}\n"
    text += "  - {name: c, deps: [c]}\n"
    (workspace / "p.yaml").write_text(text)
    r = cli("--json", "plan", "apply", "p.yaml")
    problems = r.data["error"]["problems"]
    assert r.code == 2 and [(p["line"], p["milestone"]) for p in problems] == [(3, "a"), (4, "b"), (5, "c")]
    assert "cycle: a -> b -> a" in problems[0]["message"] and "unknown milestone 'zz'" in problems[1]["message"]
    assert "lists itself" in problems[2]["message"]


def test_more_than_50_problems_are_counted(cli: CLI, workspace: Path) -> None:
    text = "objective: o\nmilestones:\n" + "".join(f"  - {{name: m{i}, retries: x}}\n" for i in range(60))
    (workspace / "p.yaml").write_text(text)
    r = cli("--json", "plan", "apply", "p.yaml")
    err = r.data["error"]
    assert r.code == 2 and len(err["problems"]) == 50 and err["more"] == 10
    assert err["message"].endswith("; and 10 more problems")
    assert err["problems"][-1]["line"] == 52

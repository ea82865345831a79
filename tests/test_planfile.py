"""Plan files as a person writes them: every problem at once, each at the
line where it starts and naming a milestone by its name; aliases that share
without exploding; and a plan of 100,000 milestones (the guard against alias
bombs limits what aliases add, not the size of an honest plan)."""

from __future__ import annotations

import re
import sqlite3
from pathlib import Path

import pytest

from milepost.errors import MilepostError, PlanFileError
from milepost.planfile import MAX_PROBLEMS, parse_plan
from tests.conftest import CLI
from tests.test_cli import snapshot


def refusal(text: str, source: str = "plan.yaml") -> MilepostError:
    with pytest.raises(MilepostError) as info:
        parse_plan(text, source)
    assert "\n" not in info.value.message
    return info.value


def test_a_missing_field_is_named_missing_without_the_entry_around_it() -> None:
    e = refusal("milestones:\n  - {name: a, gate: 'true'}\n  - {gate: 'true'}\n")
    assert e.message == (
        "plan.yaml:1: missing objective: it is required; plan.yaml:3: milestone #2: missing name: it is required"
    )


def test_every_field_problem_at_once_each_at_its_line_by_milestone_name() -> None:
    text = (
        "objective: o\n"  # 1
        "milestones:\n"  # 2
        "  - name: analyze\n"  # 3
        "    retries: -1\n"  # 4
        "  - name: merge\n"  # 5
        "    deps: [analyze]\n"  # 6
        "    timeout: 0\n"  # 7
        "    gatez: make\n"  # 8
        "  - name: ship\n"  # 9
        "    gate:\n"  # 10
        "      - {name: build, run: make}\n"  # 11
        "      - {name: upload, run: ''}\n"  # 12
        "defaults: {retries: 500}\n"  # 13
    )
    e = refusal(text)
    segments = re.split(r"; (?=plan\.yaml:)", e.message)
    assert [s.split(": ", 1)[0] for s in segments] == [f"plan.yaml:{n}" for n in (4, 7, 8, 12, 13)]
    assert (
        segments[0]
        == "plan.yaml:4: milestone 'analyze': invalid retries: input should be greater than or equal to 0 (found -1)"
    )
    assert segments[1].startswith("plan.yaml:7: milestone 'merge': invalid timeout:")
    assert segments[2].startswith("plan.yaml:8: milestone 'merge': unknown field 'gatez'; allowed here: name, deps")
    assert segments[3].startswith("plan.yaml:12: milestone 'ship', gate command 'upload': invalid run:")
    assert segments[4].startswith("plan.yaml:13: defaults: invalid retries:")
    assert not re.search(r"milestones[.\[]\d", e.message)  # names, never indexes
    problems = e.details["problems"]
    assert [(p["line"], p["milestone"], p["field"]) for p in problems] == [
        (4, "analyze", "milestones.0.retries"),
        (7, "merge", "milestones.1.timeout"),
        (8, "merge", "milestones.1.gatez"),
        (12, "ship", "milestones.2.gate.1.run"),
        (13, None, "defaults.retries"),
    ]
    assert e.details["line"] == 4 and e.details["more"] == 0


def test_names_deps_and_duplicates_reported_together_at_their_lines() -> None:
    text = (
        "objective: o\n"  # 1
        "milestones:\n"  # 2
        "  - name: a\n"  # 3
        "  - name: Merge\n"  # 4: a bad name has its line
        "  - name: c\n"  # 5
        "    deps:\n"  # 6
        "      - a\n"  # 7
        "      - zz\n"  # 8: the unknown dep's own line
        "  - name: a\n"  # 9: the second of two
        "  - name: d\n"  # 10
        "    gate: [{name: X, run: 'true'}]\n"  # 11
    )
    e = refusal(text)
    segments = re.split(r"; (?=plan\.yaml:)", e.message)
    assert segments[0] == (
        "plan.yaml:4: invalid milestone name 'Merge': use 1-64 characters: lowercase letters, digits, '-', '_'"
        " or '.', starting with a letter"
    )
    assert segments[1].startswith("plan.yaml:8: milestone 'c' depends on unknown milestone 'zz'; known: a, Merge, c")
    assert segments[2].startswith("plan.yaml:9: duplicate milestone name 'a' (entries 1 and 4)")
    assert segments[3].startswith("plan.yaml:11: invalid gate command (milestone 'd') name 'X'")
    assert len(segments) == 4
    assert e.kind == "invalid_name"  # the first problem's kind, as a lone problem would be
    assert [p["field"] for p in e.details["problems"]] == [
        "milestones.1.name",
        "milestones.2.deps.1",
        "milestones.3.name",
        "milestones.4.gate.0.name",
    ]


def test_a_cycle_alone_is_still_reported_as_a_path() -> None:
    e = refusal("objective: o\nmilestones:\n  - {name: a, deps: [b]}\n  - {name: b, deps: [a]}\n")
    assert (
        e.kind == "cycle" and e.message == "plan.yaml:3: milestone deps form a cycle: a -> b -> a (each needs the next)"
    )
    assert e.details["cycle"] == ["a", "b", "a"] and len(e.details["problems"]) == 1


def test_many_problems_stop_at_the_limit_and_count_the_rest() -> None:
    n = MAX_PROBLEMS + 5
    text = "objective: o\nmilestones:\n" + "".join(f"  - {{name: m{i}, retries: -1}}\n" for i in range(n))
    e = refusal(text)
    assert e.message.count("invalid retries") == MAX_PROBLEMS
    assert e.message.endswith("; and 5 more problems")
    assert len(e.details["problems"]) == MAX_PROBLEMS and e.details["more"] == 5
    assert e.details["problems"][-1]["line"] == MAX_PROBLEMS + 2


@pytest.mark.parametrize(
    ("text", "line", "says"),
    [
        ('objective: "never closed\nmilestones:\n  - name: a\n  - name: b\n', 1, "while scanning a quoted scalar"),
        ("objective: o\nmilestones:\n  - name: a\n    deps: [b\n  - name: c\n", 4, "flow sequence"),
        ("objective: o\nmilestones:\n  - name: a\n   deps: [b]\n", 4, "expected '-' indicator"),
        ("objective: o\nmilestones: [{name: a}]\nobjective: p\n", 3, "duplicate key 'objective' (first on line 1)"),
    ],
)
def test_yaml_errors_name_the_line_where_the_problem_starts(text: str, line: int, says: str) -> None:
    e = refusal(text)
    assert isinstance(e, PlanFileError) and e.details["line"] == line, e.message
    assert e.message.startswith(f"plan.yaml:{line}: ") and says in e.message


def test_json_errors_carry_lines_and_names_too() -> None:
    e = refusal('{"objective": "o",\n "milestones": [\n  {"name": "a"},\n  {"name": "b", "retries": -3}]}', "p.json")
    assert e.message.startswith("p.json:4: milestone 'b': invalid retries")


def test_anchors_and_merge_keys_share_without_counting_as_duplicates() -> None:
    text = (
        "objective: o\n"
        "milestones:\n"
        "  - &base {name: a, retries: 1, gate: &gate [{name: build, run: make}, {name: test, run: make test}]}\n"
        "  - {<<: *base, name: b, retries: 3}\n"  # a key written here wins over a merged one
        + "".join(f"  - {{name: m{i}, gate: *gate}}\n" for i in range(1000))
    )
    plan = parse_plan(text, "p.yaml")
    assert [(m.name, m.retries) for m in plan.milestones[:2]] == [("a", 1), ("b", 3)]
    assert plan.milestones[-1].gate == plan.milestones[0].gate and len(plan.milestones) == 1002
    e = refusal("objective: o\nmilestones:\n  - &m {name: a, name: b}\n")
    assert e.message == "plan.yaml:3: invalid YAML: duplicate key 'name' (first on line 3)"


def test_a_billion_laughs_is_refused_in_one_line_with_exit_2(cli: CLI, workspace: Path) -> None:
    from tests.test_hostile import BILLION_LAUGHS

    (workspace / "lol.yaml").write_text(BILLION_LAUGHS)
    before = snapshot(workspace)
    r = cli("plan", "apply", "lol.yaml")
    assert r.code == 2 and r.out == ""
    assert r.err.count("\n") == 1 and "aliases expand the document by more than 1,000,000 nodes" in r.err
    assert r.err.startswith("milepost: error: lol.yaml:")
    assert snapshot(workspace) == before


def test_the_json_error_document_lists_the_problems(cli: CLI, workspace: Path) -> None:
    (workspace / "p.yaml").write_text("objective: o\nmilestones:\n  - name: a\n    retries: -1\n  - name: B\n")
    r = cli("--json", "plan", "apply", "p.yaml")
    assert r.code == 2
    err = r.data["error"]
    assert err["exit_code"] == 2 and err["line"] == 4 and err["file"] == "p.yaml"
    assert err["problems"] == [
        {
            "line": 4,
            "milestone": "a",
            "field": "milestones.0.retries",
            "message": "milestone 'a': invalid retries: input should be greater than or equal to 0 (found -1)",
        },
        {
            "line": 5,
            "milestone": "B",
            "field": "milestones.1.name",
            "message": "invalid milestone name 'B': use 1-64 characters: lowercase letters, digits, '-', '_' or '.',"
            " starting with a letter",
        },
    ]  # a field error does not hide the names: every problem in one pass


def test_an_honest_100000_milestone_plan_applies(cli: CLI, workspace: Path) -> None:
    lines = ["objective: a hundred thousand milestones", "milestones:"]
    for i in range(100_000):
        deps = f", deps: [m{i - 1}]" if i % 100 else ""
        lines.append(f"  - {{name: m{i}{deps}, gate: 'true'}}")
    (workspace / "big.yaml").write_text("\n".join(lines) + "\n")
    r = cli("plan", "apply", "big.yaml")
    assert r.code == 0, r.err
    assert "created work item 1 from big.yaml: 100000 milestones" in r.out
    con = sqlite3.connect(workspace / ".milepost" / "milepost.db")
    try:
        assert con.execute("SELECT count(*) FROM milestones").fetchone() == (100_000,)
        assert con.execute("SELECT count(*) FROM milestone_deps").fetchone() == (99_000,)
    finally:
        con.close()


def test_a_one_milestone_plan_says_one_milestone(cli: CLI, workspace: Path) -> None:
    (workspace / "one.yaml").write_text("objective: o\nmilestones:\n  - name: a\n    gate: 'true'\n")
    r = cli("plan", "apply", "one.yaml")
    assert r.code == 0, r.err
    assert r.out.strip() == "created work item 1 from one.yaml: 1 milestone, plan draft (current)"

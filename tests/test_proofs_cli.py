"""Inputs, stale, verify and the cache through the command line: what a
person and a script see, exit codes, and refusals that change nothing."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import CLI


@pytest.fixture
def proven(cli: CLI, workspace: Path) -> CLI:
    (workspace / "src").mkdir()
    (workspace / "src/a.py").write_text("ok = 1\n")
    (workspace / "src/b.py").write_text("ok = 2\n")
    cli("item", "create", "inputs by hand", check=True)
    cli("add", "a", "--gate", "grep -q ok src/a.py", "--inputs", "src/a.py", check=True)
    cli(
        "add",
        "b",
        "--deps",
        "a",
        "--gate",
        "grep -q ok src/b.py",
        "--inputs",
        "src/b.py,src/a.py",
        "--inputs",
        "./README",
        check=True,
    )
    for n in ("a", "b"):
        cli("start", n, check=True)
        cli("done", n, check=True)
    return cli


@pytest.mark.parametrize(
    ("pattern", "says"),
    [
        ("/etc/passwd", "invalid input pattern '/etc/passwd' of milestone 'x': it is absolute"),
        ("../up.py", "invalid input pattern '../up.py' of milestone 'x': it escapes the workspace"),
        ("!", "invalid input pattern '!' of milestone 'x': it negates nothing"),
    ],
)
def test_bad_patterns_exit_2_with_one_line_and_change_nothing(cli: CLI, pattern: str, says: str) -> None:
    cli("item", "create", "bad inputs", check=True)
    before = cli.json("item", "show")["revision"]
    r = cli("add", "x", "--gate", "true", "--inputs", pattern)
    assert r.code == 2 and says in r.err and len(r.err.strip().splitlines()) == 1
    assert "gitignore-style patterns relative to the workspace root" in r.err
    j = cli("--json", "add", "x", "--gate", "true", "--inputs", pattern)
    assert j.code == 2 and j.data["error"]["type"] == "invalid_value" and j.data["error"]["field"] == "inputs"
    assert cli.json("item", "show")["revision"] == before and cli.json("list")["milestones"] == []


def test_inputs_need_a_gate(cli: CLI) -> None:
    cli("item", "create", "no gate", check=True)
    r = cli("add", "x", "--inputs", "src/**")
    assert r.code == 2 and "milestone 'x' has inputs but no gate" in r.err


def test_list_shows_inputs_and_the_stale_view(proven: CLI, workspace: Path) -> None:
    shown = {m["name"]: m for m in proven.json("list")["milestones"]}
    assert shown["b"]["inputs"] == ["src/b.py", "src/a.py", "./README"]
    assert shown["a"]["view"] == "done" and shown["a"]["fingerprint"] and shown["a"]["stale"] is None
    (workspace / "src/a.py").write_text("ok = 1  # edited\n")
    shown = {m["name"]: m for m in proven.json("list")["milestones"]}
    assert (shown["a"]["view"], shown["b"]["view"]) == ("stale", "stale")
    assert shown["b"]["stale"] == {
        "changed": ["src/a.py"],
        "changed_count": 1,
        "reason": "changed since proven: src/a.py",
    }
    table = proven("list").out
    assert "stale" in table and "changed since proven: src/a.py" in table and "src/b.py +2" in table
    assert "stale" in proven("graph").out and '"view": "stale"' in proven("graph", "--format", "json").out
    assert "#9e9d24" in proven("graph", "--format", "svg").out  # the stale colour in the picture
    assert "stale (done, but their inputs changed): a, b" in proven("prime").out
    # A README at the root appears: b is stale for that alone, a is not (./ anchors the name).
    (workspace / "src/a.py").write_text("ok = 1\n")
    (workspace / "README").write_text("hello\n")
    assert {m["name"]: m["view"] for m in proven.json("list")["milestones"]} == {"a": "done", "b": "stale"}


def test_next_says_it_reads_no_inputs_when_all_is_done(proven: CLI, cli: CLI, workspace: Path) -> None:
    """All done: ``next`` names nothing; with inputs it says that it did not
    read them (an edit may have made some stale) and where to look."""
    (workspace / "src/a.py").write_text("ok = 1  # edited\n")
    r = proven("--json", "next")
    assert r.code == 0 and r.data["milestone"] is None
    assert r.data["reason"] == (
        "all 2 milestones are done; next reads no inputs:"
        " `milepost list` shows any that are stale (changed since proven)"
    )
    cli("item", "create", "no inputs", check=True)
    cli("add", "c", "--gate", "true", check=True)
    cli("start", "c", check=True)
    cli("done", "c", check=True)
    assert cli.json("next")["reason"] == "the milestone is done"  # nothing to say about inputs


def test_verify_from_the_cli(proven: CLI, workspace: Path) -> None:
    r = proven("verify")
    assert r.code == 0 and "nothing to re-prove: 2 proven milestones unchanged since proven" in r.out
    (workspace / "src/b.py").write_text("broken = 2\n".replace("o", "0"))
    r = proven("--json", "verify")
    assert r.code == 1
    [b] = r.data["verified"]
    assert (b["milestone"], b["outcome"], b["status"], b["attempt"]) == ("b", "failed", "needs_fix", 2)
    assert b["stale"]["changed"] == ["src/b.py"] and r.data["ok"] is False
    human = proven("verify")
    assert human.code == 1 and "b: needs_fix — not run: failed at attempt 2; inputs unchanged since" in human.out
    assert proven("verify", "--no-cache").code == 1
    (workspace / "src/b.py").write_text("ok = 2  # fixed\n")
    r = proven("verify", "b")
    assert r.code == 0 and "b: done — proven again" in r.out
    assert proven("verify", "nope").code == 2


def test_done_takes_a_passed_run_from_the_cache_unless_told_not_to(proven: CLI, tmp_path: Path) -> None:
    plan = json.loads(proven("--json", "plan", "export").out)
    (tmp_path / "again.json").write_text(json.dumps({**plan, "objective": "the same again"}))
    proven("plan", "apply", str(tmp_path / "again.json"), check=True)
    proven("start", "a", check=True)
    r = proven("done", "a")
    assert r.code == 0 and "cached: passed as item 1 'a' attempt 1" in r.out and "no budget spent" in r.out
    proven("start", "b", check=True)
    j = proven.json("done", "b", "--no-cache")
    assert j["gate_run"]["outcome"] == "passed" and j["gate_run"]["cached_from"] is None
    runs = proven.json("runs", "a")["runs"]
    assert runs[0]["outcome"] == "cached" and runs[0]["cached_from"] == {"item": 1, "milestone": "a", "attempt": 1}
    assert "cached" in proven("runs", "a").out


def test_plan_export_keeps_inputs_and_flags(proven: CLI) -> None:
    exported = json.loads(proven("--json", "plan", "export").out)
    entries = {m["name"]: m for m in exported["milestones"]}
    assert entries["a"]["inputs"] == ["src/a.py"] and entries["b"]["inputs"] == ["src/b.py", "src/a.py", "./README"]


def test_add_sets_cache_and_flaky(cli: CLI) -> None:
    cli("item", "create", "flags", check=True)
    m = cli.json("add", "x", "--gate", "true", "--inputs", "src/**", "--no-cache", "--flaky")["milestone"]
    assert (m["inputs"], m["cache"], m["flaky"]) == (["src/**"], False, True)
    exported = json.loads(cli("--json", "plan", "export").out)["milestones"][0]
    assert (exported["cache"], exported["flaky"]) == (False, True)

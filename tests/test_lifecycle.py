"""Work items across their whole life, through the real CLI: waits and wakes,
readiness, focus and ownership, completion, revisions, filters, evidence."""

from __future__ import annotations

import hashlib
import subprocess
from pathlib import Path

import pytest

from tests.conftest import CLI
from tests.test_cli import snapshot


def test_code_review_story(cli: CLI) -> None:
    """Seed 003: A waits on a code review while B is worked; the review's wake
    arrives; A resumes with its record intact; B's own wait is untouched."""
    a = cli.json("item", "create", "A: refactor the parser")["id"]
    cli("add", "rewrite", "--gate", "true", check=True)
    cli("item", "update", str(a), "--todo", "rewrite parser:completed", "--todo", "address review:pending", check=True)
    cli("start", "rewrite", check=True)
    cli("done", "rewrite", check=True)
    cli("add", "merge-pr", "--deps", "rewrite", check=True)
    w = cli.json("item", "wait", "--wake", "external", "--resource", "pr/42", "--reason", "waiting for review of PR 42")
    assert w["readiness"] == "blocked" and w["readiness_state"] == "waiting_external"
    assert w["blocked_by"] == "external: waiting for review of PR 42"
    before_a = cli.json("item", "show", str(a))

    b = cli.json("item", "create", "B: fix the flaky test")["id"]  # focus moves to B
    cli("add", "repro", "--gate", "true", check=True)
    cli("start", "repro", check=True)
    cli("done", "repro", check=True)
    cli("item", "wait", "--wake", "task_result", "--resource", "ci/977", "--reason", "CI rerun", check=True)

    listed = {i["id"]: i for i in cli.json("item", "list")["items"]}
    assert listed[a]["readiness"] == "blocked" and "pr/42" in listed[a]["readiness_reason"]
    assert listed[b]["current"] is True

    woke = cli.json("item", "wake", "--resource", "pr/42")
    assert woke["woken"] == [a]
    after_a = cli.json("item", "show", str(a))
    assert after_a["readiness"] == "runnable" and after_a["waits"] == [] and after_a["blocked_by"] is None
    # The record is intact: milestones, todos, objective, evidence.
    for key in ("objective", "todo_list", "plan_status", "agent"):
        assert after_a[key] == before_a[key]
    assert [(m["name"], m["status"]) for m in after_a["milestones"]] == [("rewrite", "done"), ("merge-pr", "pending")]
    assert after_a["revision"] == before_a["revision"] + 1
    # B's wait is untouched, and a duplicate wake is harmless.
    assert cli.json("item", "show", str(b))["readiness_state"] == "waiting_task_result"
    r = cli("item", "wake", "--resource", "pr/42")
    assert r.code == 0 and "no wait matches resource 'pr/42'" in r.out
    # A resumes exactly where it stopped.
    cli("item", "pick", str(a), check=True)
    assert cli.json("next")["milestone"]["name"] == "merge-pr"


def test_timer_expires_at_the_next_tick(cli: CLI) -> None:
    cli("item", "create", "timed", check=True)
    cli("item", "wait", "--wake", "timer", "--until", "2020-01-01T00:00:00Z", "--reason", "cool down", check=True)
    assert cli.json("item", "show")["readiness_state"] == "waiting_timer"
    r = cli.json("tick")
    assert r["expired"] == ["work item 1: timer expired"] and r["driven"] == []
    assert cli.json("item", "show")["readiness"] == "runnable"
    assert cli.json("tick")["expired"] == []


def test_future_timer_does_not_expire(cli: CLI) -> None:
    cli("item", "create", "later", check=True)
    cli("item", "wait", "--wake", "timer", "--until", "2999-01-01T00:00:00+01:00", "--reason", "later", check=True)
    assert cli.json("tick")["expired"] == []
    assert cli.json("item", "show")["readiness_state"] == "waiting_timer"


def test_recheck_lifts_a_blocker_once(cli: CLI) -> None:
    cli("item", "create", "vendor", check=True)
    cli("item", "update", "1", "--blocked-by", "vendor API down", "--recheck-at", "2020-01-01T00:00:00Z", check=True)
    assert cli.json("item", "show")["readiness_state"] == "blocked_by"
    assert cli.json("tick")["expired"] == ["work item 1: recheck due, blocker lifted"]
    assert cli.json("item", "show")["readiness"] == "runnable"
    cli("item", "update", "1", "--blocked-by", "still down", check=True)
    assert cli.json("tick")["expired"] == []  # the recheck was consumed


def test_completion(cli: CLI, workspace: Path) -> None:
    cli("item", "create", "ship it", check=True)
    cli("add", "build", "--gate", "true", check=True)
    cli("item", "update", "1", "--todo", "write notes:pending", check=True)
    before = snapshot(workspace)
    r = cli("item", "complete", "1", "--report", "   ")
    assert r.code == 2 and "the completion report is empty" in r.err
    r = cli("item", "complete", "1", "--report", "done")
    assert r.code == 2 and "cannot complete work item 1: milestones not done: build (ready)" in r.err
    r = cli("item", "complete", "1")
    assert r.code == 2 and "a completion report is required" in r.err
    assert snapshot(workspace) == before
    cli("start", "build", check=True)
    cli("done", "build", check=True)
    assert cli.json("item", "show")["readiness_state"] == "awaiting_report"
    (workspace / "report.md").write_text("Built and shipped.\n")
    r = cli.json("item", "complete", "1", "--report-file", "report.md")
    assert r["already"] is False and r["warnings"] == ["unfinished todo: write notes"]
    shown = cli.json("item", "show", "1")
    assert shown["state"] == "completed" and shown["report"] == "Built and shipped." and shown["current"] is False
    again = cli.json("item", "complete", "1", "--report", "other")
    assert again["already"] is True and "already completed" in again["message"]
    assert cli.json("item", "show", "1")["report"] == "Built and shipped."  # stored once
    r = cli("add", "more", "--item", "1")
    assert r.code == 2 and "work item 1 is completed" in r.err
    r = cli("drive", "1")
    assert r.code == 2 and "work item 1 is completed" in r.err


def test_cancel_with_reason(cli: CLI) -> None:
    cli("item", "create", "abandon me", check=True)
    r = cli("item", "cancel", "1", "--reason", "superseded by #7")
    assert r.code == 0
    shown = cli.json("item", "show", "1")
    assert (
        shown["state"] == "cancelled"
        and shown["readiness"] == "cancelled"
        and shown["cancel_reason"] == "superseded by #7"
    )
    assert [i["id"] for i in cli.json("item", "list", "--filter", "cancelled")["items"]] == [1]


def test_focus_and_ownership(cli: CLI, workspace: Path) -> None:
    alice = cli.json("--agent", "alice", "item", "create", "alice's work")["id"]
    cli("--agent", "alice", "add", "a1", check=True)
    bob = cli.json("--agent", "bob", "item", "create", "bob's work")["id"]
    assert cli.json("--agent", "alice", "list")["item"] == alice  # one current item per agent
    assert cli.json("--agent", "bob", "list")["item"] == bob
    before = snapshot(workspace)
    r = cli("--agent", "bob", "start", "a1", "--item", str(alice))
    assert r.code == 2 and f"work item {alice} belongs to agent 'alice', not 'bob'" in r.err
    r = cli("--agent", "bob", "item", "pick", str(alice))
    assert r.code == 2 and "belongs to agent 'alice'" in r.err
    assert snapshot(workspace) == before
    r = cli("--agent", "bob", "drive", str(alice), "--dry-run")
    assert r.code == 2 and "belongs to agent 'alice'" in r.err
    cli("--agent", "bob", "--operator", "start", "a1", "--item", str(alice), check=True)
    assert cli.json("--agent", "alice", "list")["milestones"][0]["status"] == "in_progress"
    events = cli.json("--agent", "alice", "history")["events"]
    assert events[-1]["agent"] == "bob" and events[-1]["action"] == "start"


def test_pick_blocked_item_and_clear_blocker(cli: CLI, workspace: Path) -> None:
    cli("item", "create", "first", check=True)
    cli("item", "wait", "--wake", "operator_input", "--reason", "which database?", check=True)
    cli("item", "create", "second", check=True)
    shown = cli.json("item", "pick", "1")
    assert shown["current"] is True and shown["readiness"] == "waiting_for_operator"  # focused, still waiting
    before = snapshot(workspace)
    r = cli("item", "pick", "1", "--clear-blocker")
    assert r.code == 2 and "needs a reason" in r.err
    assert snapshot(workspace) == before
    shown = cli.json("item", "pick", "1", "--clear-blocker", "--reason", "operator said PostgreSQL")
    assert shown["readiness"] == "runnable" and shown["waits"] == [] and shown["blocked_by"] is None


def test_after_another_item(cli: CLI) -> None:
    cli("item", "create", "schema", check=True)
    second = cli.json("item", "create", "migrate data", "--after", "1")
    assert second["readiness_state"] == "after_item" and "work item 1" in second["readiness_reason"]
    cli("item", "complete", "1", "--report", "schema ready", check=True)
    assert cli.json("item", "show", "2")["readiness"] == "runnable"
    r = cli("item", "create", "x", "--after", "99")
    assert r.code == 2 and "no work item 99" in r.err


def test_list_filters(cli: CLI) -> None:
    cli("item", "create", "runnable one", check=True)
    cli("item", "create", "waiting one", check=True)
    cli("item", "wait", "--wake", "operator_input", "--reason", "?", check=True)
    cli("item", "create", "blocked one", check=True)
    cli("item", "update", "3", "--blocked-by", "vendor", check=True)
    cli("item", "create", "done one", check=True)
    cli("item", "complete", "4", "--report", "trivial", check=True)
    cli("item", "create", "current one", check=True)

    def ids(f: str) -> list[int]:
        return [i["id"] for i in cli.json("item", "list", "--filter", f)["items"]]

    assert ids("all") == [1, 2, 3, 4, 5]
    assert ids("open") == [1, 2, 3, 5]
    assert ids("completed") == [4]
    assert ids("current") == [5]
    assert ids("queued") == [1]
    assert ids("runnable") == [1, 5]
    assert ids("blocked") == [3]
    assert ids("waiting_for_operator") == [2]
    assert [i["id"] for i in cli.json("item", "list", "--limit", "2")["items"]] == [1, 2]


def test_plan_artifact_and_refs(cli: CLI, workspace: Path) -> None:
    cli("item", "create", "documented", check=True)
    cli("add", "g", "--gate", "echo ok", check=True)
    shown = cli.json("item", "show")
    plan = shown["plan"]
    path = Path(plan["path"])
    store_id = cli.json("init")["store_id"]  # evidence on disk is filed under the store's identity
    assert path == workspace / ".milepost" / "work-items" / store_id / "1" / "plan.md"
    assert plan["status"] == "available" and plan["size"] == path.stat().st_size
    assert plan["sha256"] == hashlib.sha256(path.read_bytes()).hexdigest() and plan["preview"].startswith(
        "# documented"
    )
    path.unlink()
    assert cli.json("item", "show")["plan"]["status"] == "missing"  # reported, never invented
    cli("ref", "add", "pr", "https://example.invalid/pr/1", "--reason", "the change", check=True)
    cli("start", "g", check=True)
    cli("done", "g", check=True)
    refs = cli.json("ref", "list")["work_refs"]
    assert [r["kind"] for r in refs] == ["pr", "gate_run"]
    assert refs[1]["ref"].endswith("g/attempt-1.log") and "g attempt 1: passed" in refs[1]["reason"]


def test_wait_refusals_change_nothing(cli: CLI, workspace: Path) -> None:
    cli("item", "create", "w", check=True)
    before = snapshot(workspace)
    cases = [
        (["item", "wait", "--wake", "task_result", "--reason", "x"], "a task_result wait needs --resource"),
        (["item", "wait", "--wake", "timer", "--reason", "x"], "a timer wait needs --until TIME"),
        (["item", "wait", "--wake", "timer", "--until", "tomorrow", "--reason", "x"], "invalid --until 'tomorrow'"),
        (["item", "wait", "--wake", "timer", "--until", "2026-12-01T09:00:00", "--reason", "x"], "no zone"),
        (["item", "update", "1", "--todo", "no state"], "invalid todo 'no state': use TEXT:STATE"),
        (["item", "update", "1", "--todo", "x:done"], "invalid todo 'x:done'"),
        (["item", "show", "9"], "no work item 9"),
    ]
    for args, msg in cases:
        r = cli(*args)
        assert r.code == 2 and msg in r.err, (args, r.err)
    assert snapshot(workspace) == before


def test_remove_on_a_draft_and_on_a_ready_plan(cli: CLI) -> None:
    cli("item", "create", "living", check=True)
    cli("add", "a", check=True)
    cli("add", "b", "--deps", "a", check=True)
    r = cli("remove", "a")
    assert r.code == 2 and "cannot remove 'a': b depends on it" in r.err
    cli("remove", "b", check=True)
    cli("item", "update", "1", "--plan-status", "ready", check=True)
    r = cli("remove", "a")  # ready is stable enough to execute, not frozen
    assert r.code == 0 and cli.json("item", "show")["milestones"] == []


def test_two_processes_race_the_same_expected_revision(cli: CLI, workspace: Path) -> None:
    cli("item", "create", "race", check=True)
    rev = cli.json("item", "show")["revision"]
    import sys

    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "milepost", "add", f"m{i}", "--expect-revision", str(rev)],
            cwd=workspace,
            env=cli.env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in range(4)
    ]
    results = [(p.wait(timeout=120), p.communicate()[1]) for p in procs]
    codes = sorted(c for c, _ in results)
    assert codes == [0, 2, 2, 2]
    assert all(f"is at revision {rev + 1}, not {rev}" in err for c, err in results if c == 2)
    assert len(cli.json("list")["milestones"]) == 1


@pytest.mark.parametrize("flag", ["--filter", "--limit"])
def test_list_rejects_bad_values(cli: CLI, flag: str) -> None:
    r = cli("item", "list", flag, "nope")
    assert r.code == 2

"""The CLI through its real entry point (``python -m milepost``) in temp
workspaces: the contract's JSON, exit codes, and every bad input leaving the
store unchanged."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from tests.conftest import CLI


def snapshot(ws: Path) -> str:
    """Every row of the store, to prove a refused command changed nothing."""
    db = ws / ".milepost" / "milepost.db"
    con = sqlite3.connect(db)
    try:
        return "\n".join(con.iterdump())
    finally:
        con.close()


@pytest.fixture
def item(cli: CLI) -> CLI:
    """A draft work item with a <- b, and c on its own."""
    cli("item", "create", "Refactor", check=True)
    cli("add", "a", "--gate", "true", "--acceptance", "a works", check=True)
    cli("add", "b", "--deps", "a", "--gate", "exit 1", "--retries", "1", check=True)
    cli("add", "c", check=True)
    return cli


MILESTONE_FIELDS = {"id", "name", "deps", "acceptance", "gate", "status", "attempts", "retries"}
ITEM_FIELDS = {"id", "objective", "state", "plan_status", "readiness", "revision", "milestones"}


def test_json_contract_fields(item: CLI) -> None:
    shown = item.json("item", "show")
    assert set(shown) >= ITEM_FIELDS
    assert shown["objective"] == "Refactor" and shown["state"] == "open" and shown["plan_status"] == "draft"
    assert shown["readiness"] == "runnable"
    ms = shown["milestones"]
    assert all(set(m) >= MILESTONE_FIELDS for m in ms)
    assert [(m["id"], m["name"], m["deps"], m["status"], m["retries"]) for m in ms] == [
        (1, "a", [], "pending", 2),
        (2, "b", ["a"], "pending", 1),
        (3, "c", [], "pending", 2),
    ]
    assert ms[0]["gate"] == [{"name": "gate", "run": "true", "cwd": None, "env": {}, "timeout": None, "each": []}]
    assert ms[0]["acceptance"] == "a works"
    assert [m["view"] for m in ms] == ["ready", "blocked", "ready"]
    listed = item.json("list")
    assert [m["name"] for m in listed["milestones"]] == ["a", "b", "c"]
    assert listed["revision"] == shown["revision"] == 4


def test_walkthrough_gate_fail_needs_fix_then_stuck(item: CLI) -> None:
    assert item.json("next")["milestone"]["name"] == "a"
    assert item.json("start", "a")["milestone"]["status"] == "in_progress"
    r = item("--json", "done", "a", "--verdict", "checked")
    assert r.code == 0 and r.data["passed"] and r.data["milestone"]["status"] == "done"
    assert r.data["gate_run"]["verdict"] == "checked"
    item("start", "b", check=True)
    r = item("done", "b")
    assert r.code == 1
    assert "b: needs_fix — gate failed: exit 1 (attempt 1; budget 1 of 2 used, 1 left); log: " in r.out
    log_path = r.out.split("log: ")[1].split()[0]
    assert Path(log_path).is_file()
    item("start", "b", check=True)
    r = item("--json", "done", "b")
    assert r.code == 1
    assert r.data["milestone"]["status"] == "stuck" and r.data["milestone"]["attempts"] == 2
    assert r.data["gate_run"]["reason"] == "exit 1" and r.data["gate_run"]["attempt"] == 2
    nxt = item.json("next")
    assert nxt["milestone"]["name"] == "c"
    runs = item.json("runs", "b")["runs"]
    assert [(x["attempt"], x["exit_code"], x["outcome"]) for x in runs] == [(1, 1, "failed"), (2, 1, "failed")]
    log = item("log", "b", "--attempt", "1")
    assert log.code == 0 and log.out.startswith("=== [gate] $ exit 1")
    r = item("reset", "b", "--reason", "fixed the env")
    assert r.code == 0 and "b: stuck -> needs_fix" in r.out
    b = item.json("list")["milestones"][1]
    assert (b["attempts"], b["last_attempt"]) == (0, 2)  # a fresh budget; attempts are numbered on
    # After the reset: attempt 3 (its log is attempt-3.log), with the budget told apart.
    item("start", "b", check=True)
    r = item("done", "b")
    assert "b: needs_fix — gate failed: exit 1 (attempt 3; budget 1 of 2 used, 1 left)" in r.out
    assert "attempt-3.log" in r.out
    assert "attempt 3: exit 1" in item("list").out


def test_done_without_gate_and_next_reasons(item: CLI) -> None:
    item("start", "c", check=True)
    assert item.json("next")["milestone"]["name"] == "a"
    assert item.json("done", "c")["milestone"]["status"] == "done"
    item("start", "a", check=True)
    assert item.json("next")["reason"] == "nothing ready: waiting on a (in_progress)"


def test_log_of_missing_file_says_so_and_prints_stored_tail(item: CLI) -> None:
    item("start", "a", check=True)
    item("done", "a", check=True)
    path = Path(item.json("runs", "a")["runs"][0]["log_path"])
    path.unlink()
    r = item("log", "a")
    assert r.code == 0
    assert "is missing" in r.err and "tail kept in the store" in r.err


def test_graph_formats(item: CLI) -> None:
    text = item("graph", check=True).out
    assert "layer 1" in text and "critical path (2 milestones by count; no gate has run yet): a -> b" in text
    mer = item("graph", "--format", "mermaid", check=True).out
    assert mer.startswith("flowchart TD") and "m1 --> m2" in mer
    dot = item("graph", "--format", "dot", check=True).out
    assert dot.startswith('digraph "item 1"') and '"a" -> "b";' in dot
    js = item.json("graph")
    assert js["edges"] == [["a", "b"]] and js["layers"] == [["a", "c"], ["b"]] and js["next"] == "a"
    assert (
        js["critical_path"] == ["a", "b"] and js["critical_path_by"] == "count" and js["critical_path_seconds"] is None
    )


def test_plan_export_round_trip(item: CLI, workspace: Path) -> None:
    exported = item("plan", "export", check=True).out
    (workspace / "again.yaml").write_text(exported)
    created = item.json("plan", "apply", "again.yaml")
    assert created["id"] == 2
    first = item.json("item", "show", "1")["milestones"]
    second = item.json("item", "show", "2")["milestones"]
    keys = ("id", "name", "deps", "acceptance", "gate", "retries", "timeout")
    assert [{k: m[k] for k in keys} for m in first] == [{k: m[k] for k in keys} for m in second]


def test_item_list_and_pick(item: CLI) -> None:
    item("item", "create", "Second", check=True)
    items = item.json("item", "list")["items"]
    assert [(i["id"], i["current"]) for i in items] == [(1, False), (2, True)]
    item("item", "pick", "1", check=True)
    assert item.json("list")["item"] == 1
    assert item.json("list", "--item", "2")["item"] == 2


def test_history_is_append_only(item: CLI) -> None:
    item("start", "a", check=True)
    events = item.json("history")["events"]
    assert [e["action"] for e in events] == ["create", "add", "add", "add", "start"]
    assert [e["revision"] for e in events] == [1, 2, 3, 4, 5]


def test_example_plan_works_by_hand(cli: CLI, workspace: Path) -> None:
    """The example refactor, applied and worked in lowest-id order."""
    import shutil

    src = Path(__file__).resolve().parent.parent / "examples" / "refactor"
    for p in src.iterdir():
        if p.is_dir():
            shutil.copytree(p, workspace / p.name)
        else:
            shutil.copy(p, workspace / p.name)
    created = cli.json("plan", "apply", "plan.yaml")
    assert created["plan_status"] == "ready" and len(created["milestones"]) == 9
    order = []
    while (m := cli.json("next")["milestone"]) is not None:
        order.append(m["name"])
        cli("start", m["name"], check=True)
        cli("done", m["name"], check=True)
    assert order == [
        "analyze-a",
        "analyze-b",
        "analyze-c",
        "extract-a",
        "extract-b",
        "extract-c",
        "merge",
        "test",
        "commit",
    ]
    assert (workspace / "dist" / "refactor.tgz").is_file()
    assert cli.json("next")["reason"] == "all 9 milestones are done"


# -- bad input: one line, exit 2 (3 for the environment), nothing changed ----------

BAD = [
    (
        "unknown dep",
        ["add", "x", "--deps", "nope"],
        r"milestone 'x' depends on unknown milestone 'nope'; known: a, b, c",
    ),
    ("duplicate name", ["add", "a"], r"milestone 'a' already exists \(id 1\); names are unique"),
    ("self dependency", ["add", "x", "--deps", "x"], r"milestone 'x' lists itself in its deps"),
    ("invalid name", ["add", "Bad Name"], r"invalid milestone name 'Bad Name': use 1-64 characters"),
    (
        "not allowed from status",
        ["done", "a"],
        r"cannot finish 'a': status is pending; allowed from pending: start, lock \(start it first: milepost start a\)",
    ),
    ("blocked start", ["start", "b"], r"cannot start 'b': blocked by a \(pending\)"),
    (
        "negative retries",
        ["add", "x", "--retries", "-1"],
        r"Invalid value for '--retries': -1 is not in the range 0<=x<=100",
    ),
    (
        "negative timeout",
        ["add", "x", "--timeout", "-5"],
        r"Invalid value for '--timeout': '-5' is not a number of seconds > 0 and <= 604800",
    ),
    ("stale revision", ["add", "x", "--expect-revision", "2"], r"work item 1 is at revision 4, not 2"),
    ("stale revision drive", ["drive", "--expect-revision", "2"], r"work item 1 is at revision 4, not 2"),
    # Refused before Prefect starts; it was a green drive of every milestone, "nope ... are done".
    ("unknown until", ["drive", "--until", "nope"], r"no milestone 'nope' in this work item; known: a, b, c"),
    ("unknown milestone", ["start", "zzz"], r"no milestone 'zzz' in this work item; known: a, b, c"),
    ("misspelt dep", ["add", "x", "--deps", "bb"], r"unknown milestone 'bb'; did you mean 'b'\? known: a, b, c"),
    ("reason missing", ["needs-fix", "a"], r"Missing option '--reason'"),
    ("unknown item", ["list", "--item", "99"], r"no work item 99"),
    ("empty gate", ["add", "x", "--gate", " "], r"empty gate for milestone 'x'"),
]


@pytest.mark.parametrize(("args", "pattern"), [b[1:] for b in BAD], ids=[b[0] for b in BAD])
def test_bad_input_is_refused_and_changes_nothing(item: CLI, workspace: Path, args: list[str], pattern: str) -> None:
    import re

    before = snapshot(workspace)
    r = item(*args)
    assert r.code == 2, (r.code, r.err)
    lines = [ln for ln in r.err.splitlines() if ln.startswith("milepost: error:")]
    assert len(lines) == 1 and re.search(pattern, lines[0]), r.err
    assert "Traceback" not in r.err
    assert snapshot(workspace) == before


def test_bad_input_json_error_document(item: CLI) -> None:
    r = item("--json", "start", "b")
    assert r.code == 2
    err = r.data["error"]
    assert err["type"] == "blocked" and err["exit_code"] == 2 and err["waiting_on"] == ["a"]
    assert "blocked by a (pending)" in err["message"]


def test_a_ready_plan_takes_structure_edits_as_revisions(item: CLI, workspace: Path) -> None:
    item("item", "update", "1", "--plan-status", "ready", check=True)
    r = item("--json", "add", "x", "--deps", "c")
    assert r.code == 0 and r.data["revision"] == 6
    history = item("history").out
    assert "r6 default: add x -> pending" in history
    item("remove", "x", check=True)
    # statuses still move; back to draft is refused while one is in progress
    item("start", "a", check=True)
    before = snapshot(workspace)
    r = item("item", "update", "1", "--plan-status", "draft")
    assert r.code == 2 and "a in progress" in r.err
    assert snapshot(workspace) == before


PLANS = {
    "cycle": (
        "objective: o\nmilestones:\n  - {name: a, deps: [b]}\n  - {name: b, deps: [a]}\n",
        r"plan.yaml:3: milestone deps form a cycle: a -> b -> a",
    ),
    "yaml syntax": ("objective: o\nmilestones:\n  - name: a\n   deps: [b\n", r"plan.yaml:4: invalid YAML"),
    "unknown field": (
        "objective: o\nmilestones:\n  - name: a\n    gates: true\n",
        r"plan.yaml:4: milestone 'a': unknown field 'gates'; allowed here: name, deps, acceptance, gate",
    ),
    "unknown dep": (
        "objective: o\nmilestones:\n  - name: a\n  - name: b\n    deps: [zz]\n",
        r"plan.yaml:5: milestone 'b' depends on unknown milestone 'zz'",
    ),
    "duplicate": ("objective: o\nmilestones:\n  - name: a\n  - name: a\n", r"duplicate milestone name 'a'"),
    "negative retries": (
        "objective: o\nmilestones:\n  - name: a\n    retries: -2\n",
        r"plan.yaml:4: milestone 'a': invalid retries: input should be greater than or equal to 0 \(found -2\)",
    ),
    "not a mapping": ("- a\n- b\n", r"a plan file holds one mapping"),
    "unclosed quote": (  # reported where the quote opened, not at the end of the file
        'objective: o\nmilestones:\n  - name: a\n    acceptance: "never closed\n  - name: b\n  - name: c\n',
        r"plan.yaml:4: invalid YAML: while scanning a quoted scalar that starts here: .* on line 7$",
    ),
    "bad name": (
        "objective: o\nmilestones:\n  - name: a\n  - name: Merge\n",
        r"plan.yaml:4: invalid milestone name 'Merge'",
    ),
    "several problems": (
        "objective: o\nmilestones:\n  - name: a\n    retries: -1\n  - name: merge\n    timeout: 0\n",
        r"plan.yaml:4: milestone 'a': invalid retries: .*; plan.yaml:6: milestone 'merge': invalid timeout: ",
    ),
    "bad json": ('{"objective": "o",\n "milestones": [}', r"plan.json:2: invalid JSON"),
}


@pytest.mark.parametrize("case", list(PLANS))
def test_bad_plan_files(item: CLI, workspace: Path, case: str) -> None:
    import re

    text, pattern = PLANS[case]
    name = "plan.json" if case == "bad json" else "plan.yaml"
    (workspace / name).write_text(text)
    before = snapshot(workspace)
    r = item("plan", "apply", name)
    assert r.code == 2
    assert len(r.err.strip().splitlines()) == 1 and re.search(pattern, r.err), r.err
    assert snapshot(workspace) == before


def test_missing_store(bare_cli: CLI, workspace: Path) -> None:
    r = bare_cli("list")
    assert r.code == 3
    assert r.err.startswith("milepost: error: no milepost store found in") and "milepost init" in r.err
    assert not (workspace / ".milepost").exists()


def test_unreachable_database_exit_3_password_masked(bare_cli: CLI) -> None:
    r = bare_cli("--db", "postgresql+psycopg://alice:hunter2@127.0.0.1:1/mp", "list")
    assert r.code == 3
    assert "cannot reach database postgresql+psycopg://alice:***@127.0.0.1:1/mp" in r.err
    assert "hunter2" not in r.err and len(r.err.strip().splitlines()) == 1
    r = bare_cli("--json", "list", MILEPOST_DB="postgresql+psycopg://alice:hunter2@127.0.0.1:1/mp")
    assert r.code == 3 and r.data["error"]["type"] == "database_unreachable"


def test_init_is_idempotent(cli: CLI) -> None:
    r = cli.json("init")
    assert r["created"] is False


def test_version_and_help(bare_cli: CLI) -> None:
    assert bare_cli("--version").code == 0
    h = bare_cli("--help")
    assert h.code == 0 and "Exit codes" in h.out
    # The command rows of the help, exactly: a command that goes missing (or
    # appears without a row here) fails this test.
    rows = h.out.split("Commands:", 1)[1].splitlines()
    listed = {line.split()[0] for line in rows if line.startswith("  ") and not line.startswith("   ")}
    assert listed == {
        "add",
        "approve",
        "confirm",
        "deploy",
        "done",
        "drive",
        "edit",
        "graph",
        "history",
        "init",
        "inputs",
        "item",
        "list",
        "lock",
        "log",
        "mcp",
        "needs-fix",
        "next",
        "plan",
        "prime",
        "ref",
        "reject",
        "remove",
        "reset",
        "runs",
        "serve",
        "server",
        "start",
        "tick",
        "unlock",
        "verify",
    }
    groups = {
        "item": {"cancel", "complete", "create", "list", "pick", "show", "update", "wait", "wake"},
        "plan": {"apply", "cycles", "export", "scaffold", "schema"},
        "ref": {"add", "list"},
        "server": {"start", "status", "stop"},
    }
    for group, subs in groups.items():
        sub = bare_cli(group, "--help").out.split("Commands:", 1)[1].splitlines()
        assert {line.split()[0] for line in sub if line.startswith("  ") and not line.startswith("   ")} == subs


def test_server_status_when_none_runs(cli: CLI) -> None:
    r = cli("server", "status")
    assert r.code == 1 and "not running" in r.out
    assert cli("--json", "server", "status").data["running"] is False


def test_drive_dry_run_needs_no_prefect(item: CLI) -> None:
    assert item.json("drive", "--dry-run")["order"] == ["a", "b", "c"]  # b is ready once a is done, and lower
    assert item.json("drive", "--dry-run", "--until", "b")["order"] == ["a", "b"]
    r = item("drive", "--dry-run", "--until", "nope")
    assert r.code == 2 and "no milestone 'nope'" in r.err


def test_drive_dry_run_names_what_it_would_not_run(cli: CLI) -> None:
    """A stuck milestone and what waits behind it are named, with why, where
    the dry run said only "nothing to run"."""
    cli("item", "create", "left", check=True)
    cli("add", "a", "--gate", "true", check=True)
    cli("add", "m", "--deps", "a", "--gate", "exit 1", "--retries", "0", check=True)
    cli("add", "z", "--deps", "m", "--gate", "true", check=True)
    cli("add", "free", "--gate", "true", check=True)
    for name in ("a", "m"):
        cli("start", name, check=True)
        cli("done", name)
    dry = cli.json("drive", "--dry-run")
    assert dry["order"] == ["free"] and dry["left"] == {"m": "stuck", "z": "waits for m"}, dry
    text = cli("drive", "--dry-run").out
    assert "1. free" in text and "not run: m: stuck" in text and "not run: z: waits for m" in text, text


def test_approve_refused_when_not_in_review(item: CLI, workspace: Path) -> None:
    item("start", "a", check=True)
    before = snapshot(workspace)
    r = item("approve", "a")
    assert r.code == 2 and "cannot approve 'a': it is not waiting for review (status in_progress)" in r.err
    assert snapshot(workspace) == before


def test_done_by_hand_on_a_review_milestone(cli: CLI) -> None:
    cli("item", "create", "review by hand", check=True)
    cli("add", "design", "--gate", "true", "--review", check=True)
    cli("start", "design", check=True)
    r = cli("done", "design")
    assert r.code == 0 and "in_review" in r.out and "milepost approve design" in r.out
    assert cli.json("item", "show")["readiness"] == "waiting_for_operator"
    cli("approve", "design", check=True)
    assert cli.json("list")["milestones"][0]["status"] == "done"


def test_emoji_codes_someone_wrote_are_shown_as_written(item: CLI) -> None:
    """rich turns ``:smile:`` into a picture unless told not to: text a user
    wrote (an objective, a reason) is shown as written, everywhere."""
    item("item", "update", "1", "--objective", "ship :rocket: now", check=True)
    item("lock", "c", "--reason", "wait for :smile: team", check=True)
    for args in (["history"], ["item", "show"], ["item", "list"], ["list"]):
        out = item(*args, check=True).out
        assert "\U0001f680" not in out and "\U0001f604" not in out, (args, out)
    assert "wait for :smile: team" in item("history").out and "ship :rocket: now" in item("item", "show").out

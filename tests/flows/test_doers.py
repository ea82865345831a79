"""Agents as doers (docs/doers.md): a deterministic fake agent
(tests/flows/fake_doer.py) works milestones of real git repositories in
temporary folders, through real drives on a real Prefect server: worktrees,
refusals, the merge in dependency order, conflicts, budgets, timeouts."""

from __future__ import annotations

import itertools
import json
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from milepost.errors import InputError
from milepost.flows.drive import run_drive
from milepost.graph import MilestoneStatus
from milepost.planfile import parse_plan
from milepost.service import Service
from tests.conftest import CLI, InProcessCLI, Postgres, ctrl_c_once, wait_until
from tests.flows.conftest import flow_run_edges

pytestmark = pytest.mark.xdist_group("prefect")

S = MilestoneStatus
FAKE = Path(__file__).with_name("fake_doer.py")
BACKENDS = ["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)]
TTL = "1"  # the drivers' lease (seconds) in the test of a killed driver


def _pg_url(request: pytest.FixtureRequest) -> str:
    """A fresh PostgreSQL database of this test's own."""
    pg: Postgres = request.getfixturevalue("postgres")
    return pg.create_db(f"mp_doers_{request.node.originalname[-40:]}")


@pytest.fixture(params=BACKENDS)
def any_service(request: pytest.FixtureRequest, workspace: Path) -> Iterator[Service]:
    """The store of the representative doer tests, on SQLite and on PostgreSQL."""
    if request.param == "sqlite":
        yield request.getfixturevalue("service")
        return
    from milepost.store import Store

    home = workspace / ".milepost"
    home.mkdir(exist_ok=True)
    svc = Service(Store.open(_pg_url(request), home, workspace, create=True))
    yield svc
    svc.close()


@pytest.fixture(params=BACKENDS)
def any_cli(request: pytest.FixtureRequest, prefect_api: str, workspace: Path) -> CLI:
    """The real ``milepost`` in subprocesses (drivers to kill), with a short
    lease, on SQLite and on PostgreSQL, in a git repository."""
    repo(workspace)
    env = {"MILEPOST_LEASE_TTL": TTL}
    if request.param == "postgresql":
        env["MILEPOST_DB"] = _pg_url(request)
    c = CLI(workspace, env)
    c("init", check=True)
    return c


def git(ws: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=ws, check=True, capture_output=True, text=True).stdout


def repo(ws: Path, files: dict[str, str] | None = None) -> None:
    """``ws`` as a git repository on ``main`` with ``files`` committed."""
    git(ws, "init", "-q", "-b", "main")
    git(ws, "config", "user.email", "dev@example.com")
    git(ws, "config", "user.name", "dev")
    default = {"src/app.py": "x = 1\n", "tests/test_app.py": "def test_x(): pass\n"}
    for path, text in (default if files is None else files).items():
        (ws / path).parent.mkdir(parents=True, exist_ok=True)
        (ws / path).write_text(text)
    (ws / ".milepost").mkdir(exist_ok=True)
    (ws / ".milepost" / ".gitignore").write_text("*\n")
    git(ws, "add", "-A")
    git(ws, "commit", "-q", "-m", "start")


class Doer:
    """The fake agent's scenario and what it saw."""

    def __init__(self, tmp: Path, scenario: dict[str, Any]) -> None:
        self.scenario_path, self.record = tmp / "scenario.json", tmp / "seen.jsonl"
        self.scenario_path.write_text(json.dumps(scenario))

    @property
    def command(self) -> str:
        return f"{sys.executable} {FAKE} {self.scenario_path} {self.record}"

    def seen(self) -> list[dict[str, Any]]:
        if not self.record.exists():
            return []
        return [json.loads(line) for line in self.record.read_text().splitlines()]

    def of(self, key: str) -> dict[str, Any]:
        return next(s for s in self.seen() if s["key"] == key)


def apply(svc: Service, text: str) -> int:
    return svc.apply_plan(parse_plan(text)).id


def merges(ws: Path, branch: str = "main") -> list[str]:
    """The merge commits' subjects on ``branch``, oldest first."""
    return git(ws, "log", "--merges", "--reverse", "--format=%s", branch).splitlines()


def statuses(svc: Service, item: int) -> dict[str, S]:
    return {m.name: m.status for m in svc.get_item(item).milestones}


def test_two_doers_in_parallel_then_their_dependent_built_on_both(
    prefect_api: str, any_service: Service, workspace: Path, tmp_path: Path
) -> None:
    service = any_service
    repo(workspace)
    doer = Doer(
        tmp_path,
        {
            "a": {"write": {"src/a.py": "A = 'a'\n"}, "sleep": 0.5},
            "b": {"write": {"src/b.py": "B = 'b'\n"}, "sleep": 0.5},
            "c": {"write": {"src/c.py": "from a import A\nfrom b import B\nC = A + B\n"}},
        },
    )
    check_c = 'cd src && python3 -c "import c; assert c.C == chr(97) + chr(98)"'
    item = apply(
        service,
        f"""objective: three modules
doer: {{protect: ['tests/**']}}
milestones:
  - {{name: a, do: '{doer.command}', gate: 'test -f src/a.py'}}
  - {{name: b, do: '{doer.command}', gate: 'test -f src/b.py'}}
  - {{name: c, deps: [a, b], do: '{doer.command}', gate: '{check_c}'}}
""",
    )
    summary = run_drive(service, item, max_parallel=2, max_doers=2)
    assert summary.ok, summary.message
    assert statuses(service, item) == {"a": S.DONE, "b": S.DONE, "c": S.DONE}
    # c's doer started from the integration tip that held both deps' work
    assert {"src/a.py", "src/b.py"} <= set(doer.of("c#1")["files"])
    subjects = merges(workspace)
    assert len(subjects) == 3 and "merge c " in subjects[2] + " ", subjects
    assert {s.split()[2] for s in subjects[:2]} == {"a", "b"}
    assert (workspace / "src" / "c.py").exists()  # the workspace is the integration checkout
    assert git(workspace, "status", "--porcelain", "--untracked-files=no") == ""
    # a and b worked at once: each doer started before the other ended
    runs = {n: _do_runs(service, n, item) for n in ("a", "b")}
    a, b = runs["a"][0], runs["b"][0]
    assert a.started_at < b.finished_at and b.started_at < a.finished_at
    assert a.outcome == "passed" and a.result_commit and a.merge_commit and a.diff_stat
    assert a.files == ["src/a.py"] and b.files == ["src/b.py"]  # what each change touched
    trailers = git(workspace, "log", "-1", "--format=%(trailers:only,unfold)", a.merge_commit).split("\n")
    assert trailers[:3] == [f"Milepost-Item: {item}", "Milepost-Milestone: a", "Milepost-Attempt: 1"]
    # merged: their worktrees and branches are gone, their commits reachable from main
    assert git(workspace, "branch", "--list", "milepost/*") == ""
    listed = [w for w in git(workspace, "worktree", "list", "--porcelain").split("\n\n") if w.strip()]
    judges = [w for w in listed if "/.judge/" in w]  # the judges' checkouts stay (their set-up's cache)
    assert len(listed) - len(judges) == 1 and judges and all("detached" in w for w in judges)
    assert git(workspace, "merge-base", "--is-ancestor", a.result_commit, "main") == ""


def _do_runs(service: Service, name: str, item: int) -> list[Any]:
    from milepost.service.do_evidence import do_runs

    return do_runs(service.ctx, name, item)


def test_a_failed_gate_feeds_the_next_attempt_which_fixes_it(
    prefect_api: str, service: Service, workspace: Path, tmp_path: Path
) -> None:
    repo(workspace)
    doer = Doer(
        tmp_path, {"a#1": {"write": {"src/a.py": "VALUE = 1\n"}}, "a#2": {"write": {"src/a.py": "VALUE = 2\n"}}}
    )
    item = apply(
        service,
        f"""objective: fix it
milestones:
  - {{name: a, do: '{doer.command}', gate: 'grep -q "VALUE = 2" src/a.py || (echo wanted VALUE = 2; exit 1)'}}
""",
    )
    summary = run_drive(service, item)
    assert summary.ok, summary.message
    assert [r.outcome.value for r in service.runs("a", item)] == ["failed", "passed"]
    second = doer.of("a#2")
    assert "wanted VALUE = 2" in second["failure"]  # MILEPOST_FAILURE_LOG: the failed attempt's log
    assert "Your last attempt failed" in second["prompt"]
    assert "MILEPOST_FAILURE_LOG" not in doer.of("a#1")["env"]
    # the failed attempt's work stayed on the branch for the second to build on (both merged by the one merge)
    assert git(workspace, "log", "--format=%s", "main").count("milepost: a, attempt") == 2
    assert len(merges(workspace)) == 1
    assert (workspace / "src" / "a.py").read_text() == "VALUE = 2\n"


def test_protected_paths_no_change_and_the_same_change_are_refused(
    prefect_api: str, service: Service, workspace: Path, tmp_path: Path
) -> None:
    repo(workspace)
    doer = Doer(
        tmp_path,
        {
            "a#1": {"write": {"src/a.py": "A = 1\n", "tests/test_app.py": "def test_x(): assert True\n"}},
            "a#2": {},  # changes nothing
            "a#3": {"write": {"src/a.py": "A = 1\n"}, "exit": 3},  # fails: its change is not kept
            "a#4": {"write": {"src/a.py": "A = 1\n"}},  # the same change as attempt 3: no progress
            "a#5": {"write": {"src/a.py": "A = 5\n"}},
        },
    )
    item = apply(
        service,
        f"""objective: refusals
doer: {{protect: ['tests/**']}}
milestones:
  - {{name: a, retries: 4, do: '{doer.command}', gate: 'test -f src/a.py'}}
""",
    )
    summary = run_drive(service, item)
    assert summary.ok, summary.message
    reasons = [r.reason for r in _do_runs(service, "a", item)]
    assert "protected paths (tests/test_app.py)" in reasons[0]
    assert "changed nothing" in reasons[1]
    assert reasons[2] == "exit 3"
    assert "no progress, the same change as attempt 3" in reasons[3]
    assert [r.outcome for r in _do_runs(service, "a", item)] == ["refused", "refused", "failed", "refused", "passed"]
    assert (workspace / "tests" / "test_app.py").read_text() == "def test_x(): pass\n"  # the tests never changed
    root = git(workspace, "rev-list", "--max-parents=0", "main").strip()
    assert git(workspace, "log", "--name-only", "--format=", f"{root}..main").split() == ["src/a.py"]


def test_a_protected_path_the_doer_committed_itself_is_never_merged(
    prefect_api: str, service: Service, workspace: Path, tmp_path: Path
) -> None:
    """An agent that commits its own work, a protected test among it: refused,
    and its branch starts again from the integration tip, so the next
    attempt (which changes nothing) has no committed change to slip through."""
    repo(workspace)
    doer = Doer(
        tmp_path,
        {
            "a#1": {
                "write": {"src/a.py": "A = 1\n", "tests/test_app.py": "def test_x(): assert True\n"},
                "commit": True,
            },
            "a#2": {},  # changes nothing: nothing on the branch either
            "a#3": {"write": {"src/a.py": "A = 3\n"}, "commit": True},
        },
    )
    item = apply(
        service,
        f"""objective: own commits
doer: {{protect: ['tests/**']}}
milestones:
  - {{name: a, retries: 2, do: '{doer.command}', gate: 'test -f src/a.py'}}
""",
    )
    summary = run_drive(service, item)
    assert summary.ok, summary.message
    runs = _do_runs(service, "a", item)
    assert [r.outcome for r in runs] == ["refused", "refused", "passed"], [r.reason for r in runs]
    assert "protected paths (tests/test_app.py); the branch starts again" in runs[0].reason
    assert "changed nothing" in runs[1].reason
    assert (workspace / "tests" / "test_app.py").read_text() == "def test_x(): pass\n"
    root = git(workspace, "rev-list", "--max-parents=0", "main").strip()
    assert "tests/" not in git(workspace, "log", "--name-only", "--format=", f"{root}..main")  # never merged
    assert (workspace / "src" / "a.py").read_text() == "A = 3\n"


def test_a_retry_that_changes_nothing_lets_the_gate_judge_the_branchs_earlier_work(
    prefect_api: str, service: Service, workspace: Path, tmp_path: Path
) -> None:
    """Attempt 1's change was right but its gate failed for a reason outside
    it (a tool missing then: here, the attempt number); the retry's doer
    changes nothing, and the gate judges the branch's committed work again
    instead of refusing the attempt for good."""
    repo(workspace)
    doer = Doer(tmp_path, {"a#1": {"write": {"src/a.py": "A = 1\n"}}, "a#2": {}})
    item = apply(
        service,
        f"""objective: judged again
milestones:
  - {{name: a, retries: 1, do: '{doer.command}', gate: 'test -f src/a.py && test "$MILEPOST_ATTEMPT" -ge 2'}}
""",
    )
    summary = run_drive(service, item)
    assert summary.ok, summary.message
    runs = _do_runs(service, "a", item)
    assert [r.outcome for r in runs] == ["passed", "passed"]
    assert "changed nothing: the gate judges the branch's earlier work again" in runs[1].reason
    assert runs[1].result_commit == runs[0].result_commit  # the same work, judged again
    assert (workspace / "src" / "a.py").read_text() == "A = 1\n"  # merged into main
    assert len(git(workspace, "log", "--merges", "--format=%s", "main").splitlines()) == 1


def test_a_doer_killed_at_its_timeout_is_a_failed_attempt(
    prefect_api: str, service: Service, workspace: Path, tmp_path: Path
) -> None:
    repo(workspace)
    doer = Doer(
        tmp_path, {"a#1": {"write": {"src/a.py": "A = 1\n"}, "sleep": 60}, "a#2": {"write": {"src/a.py": "A = 2\n"}}}
    )
    item = apply(
        service,
        f"objective: slow\nmilestones:\n  - {{name: a, do: '{doer.command}', do_timeout: 1,"
        " gate: 'test -f src/a.py'}\n",
    )
    summary = run_drive(service, item)
    assert summary.ok, summary.message
    first = _do_runs(service, "a", item)[0]
    assert first.outcome == "failed" and "timed out after 1 s" in first.reason and first.duration < 30
    assert (workspace / "src" / "a.py").read_text() == "A = 2\n"


def test_siblings_editing_one_line_one_merges_the_other_retries_from_the_new_tip(
    prefect_api: str, any_service: Service, workspace: Path, tmp_path: Path
) -> None:
    service = any_service
    repo(workspace, {"src/shared.py": "LINE = 'start'\n"})
    doer = Doer(
        tmp_path,
        {
            "a": {"write": {"src/shared.py": "LINE = 'a'\n"}},
            "b#1": {"write": {"src/shared.py": "LINE = 'b'\n"}, "sleep": 1.5},
            "b#2": {"append": {"src/shared.py": "OTHER = 'b'\n"}},
        },
    )
    item = apply(
        service,
        f"""objective: one line
milestones:
  - {{name: a, do: '{doer.command}', gate: 'true'}}
  - {{name: b, do: '{doer.command}', gate: 'true'}}
""",
    )
    summary = run_drive(service, item, max_parallel=2, max_doers=2)
    assert summary.ok, summary.message
    b_runs = service.runs("b", item)
    assert b_runs[0].outcome.value == "failed" and "merge conflict" in b_runs[0].reason
    assert (
        "CONFLICT" in Path(b_runs[0].log_path or "").read_text()
        or "<<<<<<<" in Path(b_runs[0].log_path or "").read_text()
    )
    assert "merge conflict" in doer.of("b#2")["prompt"] or "conflict" in doer.of("b#2").get("failure", "")
    assert (workspace / "src" / "shared.py").read_text() == "LINE = 'a'\nOTHER = 'b'\n"
    assert len(merges(workspace)) == 2
    assert git(workspace, "status", "--porcelain", "--untracked-files=no") == ""


def test_the_item_budget_stops_further_doers(
    prefect_api: str, service: Service, workspace: Path, tmp_path: Path
) -> None:
    repo(workspace)
    doer = Doer(
        tmp_path,
        {
            "a": {"write": {"src/a.py": "A = 1\n"}, "cost": {"usd": 0.3, "tokens": 1000}},
            "b": {"write": {"src/b.py": "B = 1\n"}, "cost": {"usd": 0.3, "tokens": 1000}},
            "c": {"write": {"src/c.py": "C = 1\n"}},
        },
    )
    item = apply(
        service,
        f"""objective: budget
doer: {{budget_usd: 0.5}}
milestones:
  - {{name: a, do: '{doer.command}', gate: 'true'}}
  - {{name: b, do: '{doer.command}', gate: 'true'}}
  - {{name: c, retries: 3, do: '{doer.command}', gate: 'true'}}
""",
    )
    summary = run_drive(service, item)
    assert not summary.ok and "stuck" in summary.message, summary.message
    shown = service.get_item(item).milestones
    assert [m.status for m in shown] == [S.DONE, S.DONE, S.STUCK]
    why = "budget: the item's doers cost $0.60 of doer.budget_usd $0.50"
    assert (shown[2].reason or "").startswith(why), shown[2].reason
    # stuck at once: one attempt, refused for the budget, though three retries were left; no doer ran for it
    assert [(r.attempt, r.outcome.value, r.reason) for r in service.runs("c", item)] == [(1, "failed", why)]
    assert why in InProcessCLI(workspace)("runs", "c", "--item", str(item), check=True).out
    assert [s["key"].split("#")[0] for s in doer.seen()] == ["a", "b"]  # c's doer never ran
    assert _do_runs(service, "c", item) == []
    assert _do_runs(service, "a", item)[0].cost_usd == 0.3 and _do_runs(service, "a", item)[0].tokens == 1000


def test_a_milestones_spent_budget_makes_it_stuck_at_once(
    prefect_api: str, service: Service, workspace: Path, tmp_path: Path
) -> None:
    repo(workspace)
    doer = Doer(
        tmp_path,
        {
            "a#1": {"write": {"src/a.py": "VALUE = 1\n"}, "cost": {"usd": 0.3}},
            "a#2": {"write": {"src/a.py": "VALUE = 2\n"}},
            "b": {"write": {"src/b.py": "B = 1\n"}, "cost": {"usd": 0.3}},
        },
    )
    item = apply(
        service,
        f"""objective: a milestone's budget
milestones:
  - {{name: a, retries: 3, do_budget_usd: 0.25, do: '{doer.command}', gate: 'grep -q "VALUE = 2" src/a.py'}}
  - {{name: b, do_budget_usd: 0.25, do: '{doer.command}', gate: 'true'}}
""",
    )
    summary = run_drive(service, item)
    assert not summary.ok
    assert statuses(service, item) == {"a": S.STUCK, "b": S.DONE}  # b's own budget was its own
    why = "budget: a's doers cost $0.30 of do_budget_usd $0.25"
    runs = [(r.attempt, r.outcome.value, r.reason) for r in service.runs("a", item)]
    assert runs[0][:2] == (1, "failed") and runs[1:] == [(2, "failed", why)], runs
    assert sorted(s["key"] for s in doer.seen()) == ["a#1", "b#1"]  # no doer for a's second attempt
    assert len(merges(workspace)) == 1


def _gone(pid: int) -> bool:
    """Whether process ``pid`` has ended (a zombie has)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return True
    return stat[stat.rindex(")") + 2] in "ZX"


def test_a_driver_killed_during_its_doer_then_driven_again(any_cli: CLI, workspace: Path, tmp_path: Path) -> None:
    """SIGKILL to a driver while its doer works: the doer dies with it, the
    next drive takes the expired lease over (the attempt interrupted, no retry
    spent: the milestone has none), and its doer starts in a clean worktree."""
    cli, started = any_cli, tmp_path / "doer-started"
    doer = Doer(
        tmp_path,
        {
            "a#1": {
                "write": {"src/junk.py": "JUNK = 1\n"},
                "append": {"src/app.py": "y = 'half done'\n"},
                "cost": {"usd": 0.3, "tokens": 700},  # not the item's form (below): not what it cost
                # Its report, in the form the item names: said before it was killed, the budgets count it.
                "say": '{"type": "thread.started", "thread_id": "t-1"}\n'
                '{"type": "turn.completed", "usage": {"input_tokens": 500, "output_tokens": 40}}',
                "touch": str(started),
                "sleep": 120,
            },
            "a#2": {"write": {"src/a.py": "A = 2\n"}},
        },
    )
    gate = "test -f src/a.py && test ! -e src/junk.py && ! grep -q half src/app.py"
    plan = tmp_path / "plan.yaml"  # (outside the repository: the checkout stays clean)
    plan.write_text(
        f"objective: killed\ndoer: {{usage: codex-json}}\n"
        f"milestones:\n  - {{name: a, retries: 0, do: '{doer.command}', gate: '{gate}'}}\n"
    )
    item = str(cli.json("plan", "apply", str(plan))["id"])
    first = cli.popen("drive", item)
    try:
        wait_until(started.exists, timeout=120, what="the first attempt's doer at work")
        pid = doer.of("a#1")["pid"]
        first.send_signal(signal.SIGKILL)
        first.communicate(timeout=30)
        wait_until(lambda: _gone(pid), timeout=10, what="the doer to die with its driver")
    finally:
        if first.poll() is None:
            first.kill()
            first.communicate()
    time.sleep(float(TTL) + 0.3)  # its lease expires
    again = cli("drive", item, timeout=180)
    assert again.code == 0, again.out + again.err
    runs = cli.json("runs", "a", "--item", item)["runs"]
    assert [(r["attempt"], r["outcome"]) for r in runs] == [(1, "interrupted"), (2, "passed")], runs
    assert "expired: its driver stopped" in runs[0]["reason"]
    do_runs = cli.json("runs", "a", "--item", item)["do_runs"]
    killed = [(d["attempt"], d["outcome"], d["cost_usd"], d["tokens"]) for d in do_runs]
    # Recorded by the driver that took over, read in the item's form (not the cost file found by looking).
    assert killed[0] == (1, "interrupted", None, 540), do_runs
    assert do_runs[0]["session"] == "t-1", do_runs[0]
    assert do_runs[0]["duration"] > 0.05, do_runs[0]  # how long the doer ran before it died with its driver
    assert cli.json("list", "--item", item)["milestones"][0]["status"] == "done"  # (retries: 0, and none was spent)
    assert [s["key"] for s in doer.seen()] == ["a#1", "a#2"]
    assert "src/junk.py" not in doer.of("a#2")["files"]  # the killed attempt's leftovers were reset away
    assert merges(workspace) == ["milepost: merge a (attempt 2)"]
    assert (workspace / "src" / "a.py").read_text() == "A = 2\n"
    assert (workspace / "src" / "app.py").read_text() == "x = 1\n" and not (workspace / "src" / "junk.py").exists()
    assert git(workspace, "status", "--porcelain") == ""


def test_a_users_uncommitted_change_is_left_untouched_and_their_next_commit_reverts_nothing(
    prefect_api: str, any_service: Service, workspace: Path, tmp_path: Path
) -> None:
    """A dirty workspace on main: the drive merges onto milepost/<item>/integration,
    never moving main under the user's index, and ends naming the command that
    brings the work in. The user commits their own work (``git add -A && git
    commit``), runs that command: both their change and the merged work are on
    main, nothing reverted."""
    service = any_service
    repo(workspace)
    (workspace / "src" / "app.py").write_text("x = 'mine, not committed'\n")
    (workspace / "notes.txt").write_text("my notes\n")
    main_before = git(workspace, "rev-parse", "main").strip()
    touched = {p: (workspace / p).stat().st_mtime_ns for p in ("src/app.py", "notes.txt", ".git/index")}
    doer = Doer(tmp_path, {"a": {"write": {"src/a.py": "A = 1\n"}}, "b": {"write": {"src/b.py": "B = 1\n"}}})
    item = apply(
        service,
        f"""objective: dirty
milestones:
  - {{name: a, do: '{doer.command}', gate: 'test -f src/a.py'}}
  - {{name: b, deps: [a], do: '{doer.command}', gate: 'test -f src/a.py && test -f src/b.py'}}
""",
    )
    summary = run_drive(service, item)
    assert summary.ok, summary.message
    side = f"milepost/{item}/integration"
    assert summary.bring_in is not None and summary.bring_in.endswith(f"bring it in: git merge {side}")
    assert summary.model_dump(mode="json")["bring_in"] == summary.bring_in
    # during the drive: the user's files, their index and main never changed
    assert (workspace / "src" / "app.py").read_text() == "x = 'mine, not committed'\n"
    assert (workspace / "notes.txt").read_text() == "my notes\n"
    assert not (workspace / "src" / "a.py").exists()
    assert git(workspace, "rev-parse", "main").strip() == main_before
    assert git(workspace, "diff", "--cached", "--name-only") == ""
    assert {p: (workspace / p).stat().st_mtime_ns for p in touched} == touched  # not even rewritten
    assert merges(workspace, side) == ["milepost: merge a (attempt 1)", "milepost: merge b (attempt 1)"]
    # the user's next commit, then the one command
    git(workspace, "add", "-A")
    git(workspace, "commit", "-q", "-m", "my own change")
    command = summary.bring_in.rsplit(": ", 1)[1].split()
    subprocess.run([*command, "--no-edit"], cwd=workspace, check=True, capture_output=True)
    for path, text in {"src/app.py": "x = 'mine, not committed'\n", "notes.txt": "my notes\n"}.items():
        assert git(workspace, "show", f"main:{path}") == text
    assert git(workspace, "show", "main:src/a.py") == "A = 1\n" and git(workspace, "show", "main:src/b.py") == "B = 1\n"
    assert git(workspace, "status", "--porcelain") == ""
    # brought in: a later drive has nothing to bring in (and merges into the workspace again)
    again = run_drive(service, item)
    assert again.ok and again.bring_in is None


def test_with_uncommitted_changes_gates_prove_the_merged_work_in_the_integration_checkout(
    prefect_api: str, service: Service, workspace: Path, tmp_path: Path
) -> None:
    """The workspace has uncommitted changes: merges go to milepost's own
    worktree of the base branch, and so do the drive's gates and its reading
    of inputs (the workspace's files never hold the merges): a merged
    milestone stays done, its dependent (no doer) is proven on both merges."""
    repo(workspace)
    (workspace / "notes.txt").write_text("my notes\n")
    where = tmp_path / "where"
    doer = Doer(tmp_path, {"a": {"write": {"src/a.py": "A = 1\n"}}, "b": {"write": {"src/b.py": "B = 2\n"}}})
    item = apply(
        service,
        f"""objective: dirty with inputs
milestones:
  - {{name: a, do: '{doer.command}', inputs: ['src/**'], gate: 'test -f src/a.py'}}
  - {{name: b, do: '{doer.command}', inputs: ['src/**'], gate: 'test -f src/b.py'}}
  - {{name: both, deps: [a, b], inputs: ['src/**'], gate: 'test -f src/a.py && test -f src/b.py && pwd > {where}'}}
""",
    )
    summary = run_drive(service, item)
    assert summary.ok, summary.message
    assert [(r.attempt, r.outcome.value) for r in service.runs("both", item=item)] == [(1, "passed")]
    # a was proven in its worktree before b's merge changed its inputs (src/**): re-proven on the integration
    # branch, where it passes (in the workspace, which lacks the merges, it had failed and reopened)
    assert [(r.attempt, r.outcome.value) for r in service.runs("a", item=item)] == [(1, "passed"), (2, "passed")]
    assert [r.outcome.value for r in service.runs("b", item=item)] == ["passed"]
    proved_in = Path(where.read_text().strip())
    assert proved_in.name == "_integration" and not proved_in.is_relative_to(workspace)
    assert (workspace / "notes.txt").read_text() == "my notes\n"
    assert not (workspace / "src" / "a.py").exists()  # the user's files never changed
    assert len(merges(workspace, f"milepost/{item}/integration")) == 2 and merges(workspace) == []


def test_a_doer_gets_no_store_and_its_own_facts(
    prefect_api: str, service: Service, workspace: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    repo(workspace)
    monkeypatch.setenv("MILEPOST_DB", "sqlite:////nowhere/secret.db")
    monkeypatch.setenv("SECRET_TOKEN", "hunter2")
    monkeypatch.setenv("DOER_ALLOWED", "yes")
    doer = Doer(tmp_path, {"a": {"write": {"src/a.py": "A = 1\n"}}})
    item = apply(
        service,
        f"""objective: what a doer is given
doer: {{env: [DOER_ALLOWED]}}
milestones:
  - {{name: a, acceptance: 'a module a', do: '{doer.command}', gate: 'test -f src/a.py', inputs: ['src/**']}}
""",
    )
    assert run_drive(service, item).ok
    seen = doer.of("a#1")
    env = seen["env"]
    assert "MILEPOST_DB" not in env and "SECRET_TOKEN" not in env and env.get("DOER_ALLOWED") == "yes"
    assert not any(k.startswith("PREFECT_") for k in env)
    assert env["MILEPOST_ITEM"] == str(item) and env["MILEPOST_MILESTONE"] == "a" and env["MILEPOST_ATTEMPT"] == "1"
    assert env["MILEPOST_AGENT"] == "doer"
    assert seen["cwd"] == env["MILEPOST_WORKTREE"] != str(workspace)
    assert not Path(seen["cwd"]).is_relative_to(workspace)  # outside the workspace: no store above it
    assert "MILEPOST_COST_FILE" in env
    for part in ("what a doer is given", "a module a", "test -f src/a.py", "src/**"):
        assert part in seen["prompt"]


def test_isolate_none_works_in_the_workspace_one_attempt_at_a_time(
    prefect_api: str, service: Service, workspace: Path, tmp_path: Path
) -> None:
    """doer.isolate: none (docs/doers.md): no git repository needed, the doer
    works in the workspace itself, one attempt (its doer, then its gate) at a
    time whatever --max-doers says, no branch, no refusals, no merge: the gate
    alone decides; a failed attempt's work stays for the next."""
    (workspace / "src").mkdir()
    doer = Doer(
        tmp_path,
        {
            "a#1": {"write": {"src/a.py": "A = 1\n"}, "sleep": 0.3},
            "a#2": {"append": {"src/a.py": "A2 = 2\n"}, "sleep": 0.3},
            "b": {"write": {"src/b.py": "B = 1\n", "tests/t.py": "# changed\n"}, "sleep": 0.3},
            "c": {},  # changes nothing: not refused, its gate decides
        },
    )
    item = apply(
        service,
        f"""objective: in place
doer: {{isolate: none, protect: ['tests/**']}}
milestones:
  - {{name: a, do: '{doer.command}', gate: 'sleep 0.5; grep -q A2 src/a.py'}}
  - {{name: b, do: '{doer.command}', gate: 'sleep 0.5; test -f src/b.py'}}
  - {{name: c, deps: [a, b], do: '{doer.command}', gate: 'test -f src/a.py && test -f src/b.py'}}
""",
    )
    summary = run_drive(service, item, max_parallel=2, max_doers=2)
    assert summary.ok, summary.message
    assert statuses(service, item) == {"a": S.DONE, "b": S.DONE, "c": S.DONE}
    assert (workspace / "src" / "a.py").read_text() == "A = 1\nA2 = 2\n"  # attempt 2 built on what 1 left
    assert (workspace / "tests" / "t.py").exists()  # (protect is not enforced in the workspace itself)
    assert not (workspace / ".git").exists() and not (workspace / ".milepost" / "worktrees").exists()
    for seen in doer.seen():
        assert seen["cwd"] == seen["env"]["MILEPOST_WORKTREE"] == str(workspace)
        assert "Nothing is committed for you" in seen["prompt"]
    runs = {n: _do_runs(service, n, item) for n in ("a", "b", "c")}
    assert [r.outcome for r in runs["a"]] == ["passed", "passed"]  # the gate failed attempt 1, not the doer
    assert [r.outcome for r in runs["c"]] == ["passed"]
    assert all(r.base_commit is None and r.merge_commit is None for rs in runs.values() for r in rs)
    # one attempt at a time: from its doer's start to its gate's end, no other attempt's doer or gate ran
    spans = sorted(
        (d.started_at, g.finished_at)
        for n in ("a", "b", "c")
        for d, g in zip(runs[n], service.runs(n, item), strict=True)
    )
    assert all(end <= start for (_, end), (start, _) in itertools.pairwise(spans)), spans


def test_the_flow_run_shows_do_before_gate(prefect_api: str, service: Service, workspace: Path, tmp_path: Path) -> None:
    repo(workspace)
    doer = Doer(tmp_path, {"a": {"write": {"src/a.py": "A = 1\n"}}, "b": {"write": {"src/b.py": "B = 1\n"}}})
    item = apply(
        service,
        f"""objective: the UI
milestones:
  - {{name: a, do: '{doer.command}', gate: 'true'}}
  - {{name: b, deps: [a], do: '{doer.command}', gate: 'true'}}
""",
    )
    summary = run_drive(service, item)
    assert summary.ok and summary.flow_run_id
    labels, edges = flow_run_edges(prefect_api, summary.flow_run_id)
    assert {"do a", "a", "do b", "b"} <= labels
    assert {("do a", "a"), ("a", "do b"), ("do b", "b")} <= edges


def test_bad_doer_setups_are_refused_before_anything_runs(service: Service, workspace: Path, tmp_path: Path) -> None:
    doer = Doer(tmp_path, {})
    item = apply(service, f"objective: no git\nmilestones:\n  - {{name: a, do: '{doer.command}', gate: 'true'}}\n")
    with pytest.raises(InputError, match="not in a git repository"):
        run_drive(service, item)
    assert statuses(service, item) == {"a": S.PENDING} and doer.seen() == []
    repo(workspace)
    other = apply(
        service,
        f"objective: no base\ndoer: {{base: nope}}\nmilestones:\n  - {{name: a, do: '{doer.command}', gate: 'true'}}\n",
    )
    with pytest.raises(InputError, match=r"doer\.base 'nope' is not a branch"):
        run_drive(service, other)
    assert statuses(service, other) == {"a": S.PENDING}


def test_a_doer_that_deletes_its_worktree_fails_and_the_next_attempt_gets_a_new_one(
    prefect_api: str, service: Service, workspace: Path, tmp_path: Path
) -> None:
    repo(workspace)
    doer = Doer(tmp_path, {"a#1": {"rm_worktree": True}, "a#2": {"write": {"src/a.py": "A = 1\n"}}})
    item = apply(
        service, f"objective: gone\nmilestones:\n  - {{name: a, do: '{doer.command}', gate: 'test -f src/a.py'}}\n"
    )
    summary = run_drive(service, item)
    assert summary.ok, summary.message
    assert "deleted its worktree" in _do_runs(service, "a", item)[0].reason


def test_the_example_as_a_user_runs_it(prefect_api: str, service: Service, workspace: Path) -> None:
    """examples/doers, as docs/doers.md tells: every milestone's work merged
    into main in dependency order, square fixed on its retry, tests unchanged."""
    import shutil

    from tests.conftest import EXAMPLES

    for p in (EXAMPLES / "doers").iterdir():
        (shutil.copytree if p.is_dir() else shutil.copy)(p, workspace / p.name)
    repo(workspace, {})
    item = apply(service, (workspace / "plan.yaml").read_text())
    summary = run_drive(service, item, max_parallel=2, max_doers=2)
    assert summary.ok, summary.message
    subjects = merges(workspace)
    assert [s.split()[2] for s in subjects][-1] == "registry" and len(subjects) == 3
    assert [r.outcome.value for r in service.runs("square", item)] == ["failed", "passed"]
    root = git(workspace, "rev-list", "--max-parents=0", "main").strip()
    changed = git(workspace, "diff", "--name-only", root, "main").split()
    assert sorted(changed) == ["src/shapes/circle.py", "src/shapes/registry.py", "src/shapes/square.py"]
    assert git(workspace, "status", "--porcelain", "--untracked-files=no") == ""


def _props(elem: Any) -> dict[str, str]:
    return {p.get("name"): p.get("value") for p in elem.find("properties")}


def test_the_doers_evidence_is_shown_where_users_look(
    prefect_api: str, service: Service, workspace: Path, tmp_path: Path
) -> None:
    """One real drive (the CLI, --json, --junit, GITHUB_STEP_SUMMARY), then
    each surface read back: the drive's summary, the JUnit report, the step
    summary, ``log`` and ``log --do``, ``list``, and the MCP tools
    (``milestone runs`` as ``runs --json``, ``next`` with its do command, and
    ``drive``'s doers)."""
    import os
    import xml.etree.ElementTree as ET

    import anyio
    from rich.console import Console

    from milepost.events import DriveSummary
    from milepost.present.terminal import show_summary
    from tests.conftest import CLI
    from tests.test_mcp import call, server

    repo(workspace)
    doer = Doer(
        tmp_path,
        {
            "a": {"say": "a's doer at work", "write": {"src/a.py": "A = 1\n"}, "cost": {"usd": 0.25, "tokens": 500}},
            "b": {"say": "b's doer gives up", "cost": {"usd": 0.1, "tokens": 40}, "exit": 3},
            "d": {"write": {"src/d.py": "D = 1\n"}, "cost": {"usd": 0.05, "tokens": 7}},
        },
    )
    item = apply(
        service,
        f"""objective: evidence
milestones:
  - {{name: a, do: '{doer.command}', gate: 'echo the gate of a; test -f src/a.py'}}
  - {{name: b, retries: 0, do: '{doer.command}', gate: 'true'}}
  - {{name: c, gate: 'true'}}
""",
    )
    cli, junit, step = CLI(workspace), tmp_path / "report.xml", tmp_path / "step.md"
    r = cli("--json", "drive", str(item), "--junit", str(junit), GITHUB_STEP_SUMMARY=str(step))
    assert r.code == 1, r.out + r.err
    a_run, b_run = _do_runs(service, "a", item)[0], _do_runs(service, "b", item)[0]
    assert a_run.result_commit and a_run.merge_commit and b_run.exit_code == 3

    # the drive's summary: the doers in all (JSON, and the line a person reads)
    finished = json.loads(r.out.splitlines()[-1])
    events = [json.loads(line) for line in r.out.splitlines() if line.startswith("{")]
    [a_done] = [e for e in events if e["event"] == "do_finished" and e["milestone"] == "a"]
    assert a_done["files"] == ["src/a.py"] and a_done["outcome"] == "passed"
    assert finished["event"] == "drive_finished"
    assert finished["doers"] == {"runs": 2, "passed": 1, "cost_usd": 0.35, "tokens": 540}
    con = Console(record=True, width=200)
    show_summary(con, DriveSummary.model_validate({k: v for k, v in finished.items() if k not in ("event", "at")}))
    assert "(2 gate runs, 2 do runs (1 passed), $0.35, 540 tokens, " in con.export_text(), con.export_text()

    # JUnit: each doer milestone's last do run as properties; b's failure names its doer's
    suite = ET.parse(junit).getroot().find("testsuite")
    assert suite is not None
    cases = {c.get("name"): c for c in suite.iter("testcase")}
    a, b = _props(cases["a"]), _props(cases["b"])
    assert (a["do_outcome"], a["do_exit_code"], a["do_cost_usd"], a["do_tokens"]) == ("passed", "0", "0.25", "500")
    assert (a["do_result_commit"], a["do_merge_commit"]) == (a_run.result_commit, a_run.merge_commit)
    assert a["do_diff_stat"].startswith("1 file changed, 1 insertion(+)") and a["do_runs"] == "1"
    assert a["do_files"] == "src/a.py" and b["do_files"] == ""
    assert (b["do_outcome"], b["do_exit_code"], b["do_result_commit"]) == ("failed", "3", "")
    assert not [k for k in _props(cases["c"]) if k.startswith("do_")]
    failure = cases["b"].find("failure")
    assert failure is not None and failure.text is not None
    assert "do failed: exit 3 (exit code 3, " in failure.text and "$0.10, 40 tokens" in failure.text
    assert "b's doer gives up" in failure.text
    totals = _props(suite)
    assert (totals["do_runs"], totals["do_passed"], totals["do_cost_usd"], totals["do_tokens"]) == (
        "2",
        "1",
        "0.3500",
        "540",
    )

    # the step summary: a do column and the totals
    md = step.read_text()
    assert "| total | do | last reason |" in md and "2 do runs (1 passed), $0.35, 540 tokens" in md
    assert "| passed (attempt 1, $0.25, 500 tokens) |" in md and "| failed (attempt 1, $0.10, 40 tokens) |" in md
    assert "| - | " in md.split("| c |")[1].splitlines()[0]  # c has no doer

    # log: the gate's log ends with the doer's outcome too; --do prints the doer's own log
    ic = InProcessCLI(workspace)
    gate_log = ic("log", "a", "--item", str(item), check=True).out
    assert "the gate of a" in gate_log and "a's doer at work" not in gate_log
    last = gate_log.splitlines()[-1]
    assert last.startswith("=== attempt 1 passed: ") and "; do passed: exit 0 (exit code 0, " in last, last
    assert "$0.25, 500 tokens, 1 file changed" in last and f"commit {a_run.result_commit[:10]}" in last
    do_log = ic("log", "a", "--do", "--item", str(item), check=True).out
    assert "a's doer at work" in do_log and "the gate of a" not in do_log
    assert do_log.splitlines()[-1].startswith("=== attempt 1 do passed: exit 0 (exit code 0, "), do_log
    shown = ic.json("log", "b", "--do", "--attempt", "1", "--item", str(item))
    assert shown["do_run"]["exit_code"] == 3 and shown["log_exists"] is True
    assert shown["run"]["attempt"] == 1 and shown["run"]["outcome"] == "failed"
    assert ic.json("log", "a", "--item", str(item))["do_run"]["result_commit"] == a_run.result_commit
    assert "do_run" not in ic.json("log", "c", "--item", str(item))
    none = ic("log", "c", "--do", "--item", str(item))
    assert none.code == 2 and "has no do runs" in none.err
    missing = ic("log", "a", "--do", "--attempt", "2", "--item", str(item))
    assert missing.code == 2 and "attempt 2 of 'a' ran no doer" in missing.err

    # runs: the do table's change names the files; --json's do_runs lists them
    runs_text = ic("runs", "a", "--item", str(item), check=True).out
    assert "src/a.py" in runs_text.split("do (the doer before each gate)")[1], runs_text
    assert ic.json("runs", "a", "--item", str(item))["do_runs"][0]["files"] == ["src/a.py"]

    # list: a do column beside the gate
    table = ic("list", "--item", str(item), check=True).out.splitlines()
    assert table[0].split()[5:7] == ["gate", "do"], table[0]
    assert sys.executable[:20] in table[1] and table[3].split()[6] == "-", table

    # the MCP tools
    other = apply(service, f"objective: more\nmilestones:\n  - {{name: d, do: '{doer.command}', gate: 'true'}}\n")
    prefect = {k: v for k, v in os.environ.items() if k.startswith(("PREFECT_", "DO_NOT_TRACK"))}

    async def go() -> None:
        async with server(workspace, tmp_path / "mcp.log", **prefect) as s:
            runs = await call(s, "milestone", action="runs", name="a", item=item)
            assert runs == cli.json("runs", "a", "--item", str(item))
            assert runs["do_runs"][0]["cost_usd"] == 0.25 and runs["runs"][0]["outcome"] == "passed"
            assert "do_runs" not in await call(s, "milestone", action="runs", name="c", item=item)
            nxt = await call(s, "milestone", action="next", item=other)
            assert nxt["next"]["do"] == doer.command
            drove = await call(s, "drive", item=other)
            assert drove["ok"] is True and drove["doers"] == {"runs": 1, "passed": 1, "cost_usd": 0.05, "tokens": 7}

    anyio.run(go)


def test_a_driver_killed_between_merge_and_record_is_recorded_passed_by_the_next(
    any_cli: CLI, workspace: Path, tmp_path: Path
) -> None:
    """SIGKILL right after the merge, before the record (crash point
    ``merged``): the next drive takes the attempt over, finds its merge
    commit by its trailers, records it passed; nothing runs or merges twice,
    nothing is refused."""
    cli = any_cli
    doer = Doer(tmp_path, {"a": {"write": {"src/a.py": "A = 1\n"}}})
    plan = tmp_path / "plan.yaml"
    plan.write_text(
        f"objective: killed after its merge\nmilestones:\n"
        f"  - {{name: a, do: '{doer.command}', gate: 'test -f src/a.py'}}\n"
    )
    item = str(cli.json("plan", "apply", str(plan))["id"])
    first = cli("drive", item, timeout=180, MILEPOST_CRASH_AT="merged")
    assert first.code == -signal.SIGKILL, first.out + first.err
    assert merges(workspace) == ["milepost: merge a (attempt 1)"]
    merge = git(workspace, "rev-parse", "main").strip()
    time.sleep(float(TTL) + 0.3)  # its lease expires (its holder is gone too)
    again = cli("drive", item, timeout=180)
    assert again.code == 0, again.out + again.err
    runs = cli.json("runs", "a", "--item", item)
    assert [(r["attempt"], r["outcome"]) for r in runs["runs"]] == [(1, "passed")], runs["runs"]
    assert f"merged as {merge[:10]}" in runs["runs"][0]["reason"]
    assert [(d["attempt"], d["outcome"], d["merge_commit"]) for d in runs["do_runs"]] == [(1, "passed", merge)]
    assert [s["key"] for s in doer.seen()] == ["a#1"]  # no doer ran again
    assert merges(workspace) == ["milepost: merge a (attempt 1)"]  # nothing merged twice
    assert git(workspace, "branch", "--list", "milepost/*") == ""  # its worktree and branch dropped, as merged
    listed = [w for w in git(workspace, "worktree", "list", "--porcelain").splitlines() if w.startswith("worktree ")]
    assert len([w for w in listed if "/.judge/" not in w]) == 1, listed  # (the judges stay: their set-up's cache)
    assert cli.json("list", "--item", item)["milestones"][0]["status"] == "done"
    assert git(workspace, "status", "--porcelain") == ""


def test_a_driver_killed_between_gate_and_merge_leaves_no_done_without_its_merge(
    any_cli: CLI, workspace: Path, tmp_path: Path
) -> None:
    """SIGKILL after the gate passed, before the merge (crash point
    ``merging``): the attempt is recorded interrupted, not passed (nothing
    was merged); the next attempt's doer changes nothing, its gate judges the
    branch's work again, and that work is merged once."""
    cli = any_cli
    doer = Doer(tmp_path, {"a#1": {"write": {"src/a.py": "A = 1\n"}}, "a#2": {}})
    plan = tmp_path / "plan.yaml"
    plan.write_text(
        f"objective: killed before its merge\nmilestones:\n"
        f"  - {{name: a, retries: 0, do: '{doer.command}', gate: 'test -f src/a.py'}}\n"
    )
    item = str(cli.json("plan", "apply", str(plan))["id"])
    first = cli("drive", item, timeout=180, MILEPOST_CRASH_AT="merging")
    assert first.code == -signal.SIGKILL, first.out + first.err
    assert merges(workspace) == []
    time.sleep(float(TTL) + 0.3)
    again = cli("drive", item, timeout=180)
    assert again.code == 0, again.out + again.err
    runs = cli.json("runs", "a", "--item", item)["runs"]
    assert [(r["attempt"], r["outcome"]) for r in runs] == [(1, "interrupted"), (2, "passed")], runs
    assert "its driver stopped before merging its work" in runs[0]["reason"]
    assert merges(workspace) == ["milepost: merge a (attempt 2)"]
    assert (workspace / "src" / "a.py").read_text() == "A = 1\n"


def test_a_merge_failing_without_a_conflict_is_one_failed_attempt_and_the_drive_goes_on(
    prefect_api: str, any_service: Service, workspace: Path, tmp_path: Path
) -> None:
    """Another git process holds the index as a passed attempt is merged (its
    ``index.lock``): the merge fails (no conflict), the attempt fails with the
    reason, and the drive goes on: the retry's doer finds the lock gone, its
    gate judges the branch's work again, it is merged, and b after it."""
    service = any_service
    repo(workspace)
    lock = workspace / ".git" / "index.lock"
    doer = Doer(
        tmp_path,
        {
            "a#1": {"write": {"src/a.py": "A = 1\n"}},
            "a#2": {"delete": [str(lock)]},
            "b": {"write": {"src/b.py": "B\n"}},
        },
    )
    hold = f'if [ "$MILEPOST_ATTEMPT" = 1 ]; then : > {lock}; fi'
    item = apply(
        service,
        f"""objective: a lock held
milestones:
  - {{name: a, retries: 1, do: '{doer.command}', gate: 'test -f src/a.py && {{ {hold}; }}'}}
  - {{name: b, deps: [a], do: '{doer.command}', gate: 'test -f src/b.py'}}
""",
    )
    summary = run_drive(service, item)
    assert summary.ok, summary.message
    runs = service.runs("a", item)
    assert [r.outcome.value for r in runs] == ["failed", "passed"]
    assert runs[0].reason.startswith(f"merge of milepost/{item}/a failed: git merge of"), runs[0].reason
    assert "Unable to write index" in runs[0].reason
    assert "=== merge of" in Path(runs[0].log_path or "").read_text()
    assert merges(workspace) == ["milepost: merge a (attempt 2)", "milepost: merge b (attempt 1)"]
    assert not (workspace / ".git" / "MERGE_HEAD").exists() and git(workspace, "status", "--porcelain") == ""


def test_a_drive_stopped_while_its_doer_works_records_how_long_the_doer_ran(
    prefect_api: str, workspace: Path, tmp_path: Path
) -> None:
    """SIGINT to a driver while its doer works: exit 130, the attempt
    interrupted (its milestone ready again), and its do run recorded
    interrupted with the time the doer ran (it was not recorded at all)."""
    repo(workspace)
    cli, started = CLI(workspace), tmp_path / "doer-started"
    cli("init", check=True)
    doer = Doer(tmp_path, {"a": {"write": {"src/a.py": "A = 1\n"}, "touch": str(started), "sleep": 60}})
    plan = tmp_path / "plan.yaml"
    plan.write_text(f"objective: stopped\nmilestones:\n  - {{name: a, do: '{doer.command}', gate: 'true'}}\n")
    item = str(cli.json("plan", "apply", str(plan))["id"])
    proc = cli.popen("drive", item)
    out, err = ctrl_c_once(proc, started.exists, "the doer at work", after=0.5)
    assert proc.returncode == 130, (out, err)
    runs = cli.json("runs", "a", "--item", item)
    assert [(r["attempt"], r["outcome"]) for r in runs["runs"]] == [(1, "interrupted")], runs
    [do] = runs["do_runs"]
    assert do["outcome"] == "interrupted" and do["duration"] >= 0.4, do
    assert cli.json("list", "--item", item)["milestones"][0]["status"] == "pending"

"""The fault test: the parts a drive stands on fail for real under it, and no
proven result is lost, no gate passes twice, the drive ends within a bound
with the exit code of the contract and one line naming the part, and a
recovery drive finishes the item.

- a real ``prefect server`` (this module's own, not the session's) killed
  with SIGKILL under a drive;
- a real PostgreSQL server (a cluster of this module's own) restarted under
  a drive, and stopped longer than the retry bound;
- a real SQLite write lock held by another process past the busy timeout;
- a gate's log on a full file system (a 2 MB tmpfs: needs permission to
  mount, else skipped saying so) or past the file-size limit (RLIMIT_FSIZE
  on the driver, no permission needed);
- a gate printing hundreds of megabytes without a line end;
- a driver frozen with SIGSTOP longer than its lease while another drives.

Gates keep a ledger (``tests/ledger.py``): every execution, every pass.
The figures (time from a loss to the exit, ...) are printed (``pytest -s``)
and, with ``MILEPOST_FAULT_REPORT=FILE``, written as JSON; docs/exactly-once.md
quotes them. The helpers are in ``tests/flows/faults.py``.
"""

from __future__ import annotations

import json
import os
import resource
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from milepost.flows.server import server_status
from tests.conftest import CLI, PgCluster, wait_until
from tests.flows.conftest import _free_port, run_script
from tests.flows.faults import NAMES, Driver, Server, check_exactly_once, errors, figure, passed_runs, plan
from tests.ledger import Ledger

# One worker runs them all, one after the other (they own a server each).
pytestmark = [pytest.mark.xdist_group("faults"), pytest.mark.timeout(600)]


@pytest.fixture(scope="module")
def prefect_server() -> Iterator[Server]:
    server = Server()
    server.up()
    try:
        yield server
    finally:
        server.remove()


@pytest.fixture
def cli_of(workspace: Path, prefect_server: Server) -> Callable[..., CLI]:
    """A real CLI in the workspace, talking to this module's Prefect server."""

    def make(**env: str) -> CLI:
        prefect_server.up()
        return CLI(workspace, {"PREFECT_API_URL": prefect_server.api_url, "PREFECT_UI_URL": "", **env})

    return make


# -- a locked SQLite file ---------------------------------------------------------------


def test_a_sqlite_lock_held_past_the_busy_timeout_is_exit_3_and_changes_nothing(
    cli_of: Callable[..., CLI], workspace: Path
) -> None:
    cli = cli_of(MILEPOST_BUSY_TIMEOUT="1")
    cli("init", check=True)
    item, ledger = plan(cli, 0.2)
    before = cli.json("list", "--item", item)
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sqlite3, sys, time\n"
            "c = sqlite3.connect(sys.argv[1], isolation_level=None); c.execute('BEGIN IMMEDIATE')\n"
            "print('locked', flush=True); time.sleep(60)",
            str(workspace / ".milepost" / "milepost.db"),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "locked"
        t0 = time.monotonic()
        start = cli("start", "a1", "--item", item)
        figure("sqlite lock: `start` exits after (s)", time.monotonic() - t0)
        assert start.code == 3 and errors(start.err) == start.err.splitlines(), start
        assert "database is locked by another process" in start.err and "Traceback" not in start.err
        driver = Driver(cli, item, "--max-parallel", "2")
        code, out = driver.finish(120)
        figure("sqlite lock: `drive` exits after (s)", time.monotonic() - driver.started)
        assert code == 3, out
        assert len(errors(out)) == 1 and "database is locked by another process" in errors(out)[0], out
        assert "Traceback" not in out
    finally:
        holder.kill()
        holder.communicate()
    after = cli.json("list", "--item", item)
    assert after["revision"] == before["revision"] and after["milestones"] == before["milestones"]
    assert ledger.executions() == []
    # Free again: the next drive finishes the item.
    assert cli("drive", item, "--max-parallel", "2", timeout=300).code == 0
    check_exactly_once(cli, item, ledger, NAMES)


# -- PostgreSQL restarted, and down for longer -------------------------------------------


@pytest.mark.parametrize("phase", ["early", "flow"])
def test_a_postgresql_restart_under_a_drive_is_ridden_out(
    cli_of: Callable[..., CLI], cluster: PgCluster, phase: str
) -> None:
    """``early``: while the first gates run and Prefect is still loading (the
    drive's start-up reads); ``flow``: once its flow run has begun."""
    db = cluster.server.create_db(f"mp_fault_restart_{phase}")
    cli = cli_of(MILEPOST_DB=db, MILEPOST_LEASE_TTL="4", MILEPOST_DEBUG="1")  # (debug: a traceback if it fails)
    cli("init", check=True)
    item, ledger = plan(cli, 2)
    driver = Driver(cli, item, "--max-parallel", "2")
    try:
        # The first two gates start before Prefect is imported.
        wait_until(
            lambda: len(ledger.executions()) >= 2 and (phase == "early" or "drive work item" in driver.log.read_text()),
            60,
            what=f"two gates running ({phase})",
        )
        t0 = time.monotonic()
        cluster.restart()  # every connection is cut; the server is back within a second or so
        figure(f"postgresql restart ({phase}): server back after (s)", time.monotonic() - t0)
        wait_until(lambda: len(ledger.executions()) >= 4, 60, what="the drive to go on after the restart")
        cluster.restart()  # and once more, while the next gates run
        code, out = driver.finish(180)
    finally:
        driver.stop()
    assert code == 0, out  # as if nothing had happened
    assert errors(out) == []
    # No gate ran twice: nothing passed was recorded interrupted and run again.
    assert sorted(m for m, _ in ledger.executions()) == sorted(NAMES), ledger.lines()
    check_exactly_once(cli, item, ledger, NAMES)


def test_postgresql_down_past_the_retry_bound_is_exit_3_and_the_next_drive_recovers_at_once(
    cli_of: Callable[..., CLI], cluster: PgCluster
) -> None:
    cli = cli_of(MILEPOST_DB=cluster.server.create_db("mp_fault_down"))
    cli("init", check=True)
    item, ledger = plan(cli, 3)
    driver = Driver(cli, item, "--max-parallel", "2", MILEPOST_DB_RETRY="4")
    try:
        wait_until(lambda: len(ledger.executions()) >= 2, 60, what="two gates running")
        cluster.stop("fast")
        stopped = time.monotonic()
        code, out = driver.finish(120)
        down_to_exit = time.monotonic() - stopped
    finally:
        driver.stop()
        cluster.start()
    figure("postgresql down: exit 3 after (s, gates of 3 s, MILEPOST_DB_RETRY=4)", down_to_exit)
    assert code == 3, out
    assert len(errors(out)) == 1 and "cannot reach database" in errors(out)[0], out
    assert "not done" not in out and "Traceback" not in out
    assert down_to_exit < 3 + 4 + 15, out  # the gates' rest, the retry bound, the shutdown
    # The running gates finished into their files while the database was away.
    ran = {m for m, _ in ledger.executions()}
    assert ran and all(ledger.has("end", m) for m in ran), ledger.lines()
    # The next drive, at once (the leases would last 120 s): the dead driver is
    # provably gone, its passed gates are recovered from their files, not run again.
    t0 = time.monotonic()
    again = cli("--json", "drive", item, "--max-parallel", "2", timeout=300)
    figure("postgresql down: recovery drive took (s, leases of 120 s)", time.monotonic() - t0)
    assert again.code == 0, again.err
    recovered = [e for e in map(json.loads, again.out.splitlines()) if e["event"] == "lease_reclaimed"]
    assert {e["milestone"] for e in recovered} == ran and all(e["outcome"] == "passed" for e in recovered)
    check_exactly_once(cli, item, ledger, NAMES)


# -- a full disk, or the file-size limit, under a gate's log -----------------------------

BIG = """objective: a gate that fills the disk
milestones:
  - {{name: big, gate: "head -c 5000000 /dev/zero && {gate}", retries: 1}}
"""


def _mount_tmpfs(folder: Path) -> str | None:
    """Mount a 2 MB tmpfs on ``folder``; None when done, else why it cannot be."""
    if os.geteuid() != 0 or shutil.which("mount") is None:
        return "mounting a tmpfs needs root (CI runs as root); the RLIMIT_FSIZE case covers the rest here"
    folder.mkdir(parents=True, exist_ok=True)
    p = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(folder)], capture_output=True, text=True)
    if p.returncode != 0:
        return f"no permission to mount a tmpfs here ({p.stderr.strip()}); CI's machine runs this case"
    return None


def _limit_file_size() -> None:
    resource.setrlimit(resource.RLIMIT_FSIZE, (2_000_000, 2_000_000))


@pytest.mark.parametrize("fault", ["tmpfs", "fsize"])
def test_a_full_disk_under_a_gates_log_is_a_failed_attempt_naming_it_never_a_livelock(
    cli_of: Callable[..., CLI], workspace: Path, fault: str
) -> None:
    cli = cli_of()
    cli("init", check=True)
    item, ledger = plan(cli, 0, BIG)
    logs = workspace / ".milepost" / "logs"
    preexec = None
    if fault == "tmpfs":
        why = _mount_tmpfs(logs)
        if why is not None:
            pytest.skip(why)
    else:
        preexec = _limit_file_size
    try:
        driver = Driver(cli, item, preexec=preexec)
        code, out = driver.finish(180)
        figure(f"full disk ({fault}): drive ended after (s)", time.monotonic() - driver.started)
    finally:
        if fault == "tmpfs":
            subprocess.run(["umount", "-l", str(logs)], check=False)
    # A failed attempt each time (the budget: 1 + 1 retry), never in progress,
    # never a crash of the driver, never an endless round of reclaims.
    assert code == 1, out
    assert "internal error" not in out and "Traceback" not in out
    runs = cli.json("runs", "big", "--item", item)["runs"]
    assert [r["outcome"] for r in runs] == ["failed", "failed"], runs
    full = "no space left on device" if fault == "tmpfs" else "file-size limit"
    assert all(full in r["reason"] for r in runs), runs
    assert [m["status"] for m in cli.json("list", "--item", item)["milestones"]] == ["stuck"]
    # Room again: the operator resets it and the next drive finishes.
    cli("reset", "big", "--item", item, "--reason", "disk freed", check=True)
    assert cli("drive", item, timeout=300).code == 0
    assert ledger.count("end")["big"] == 1 and ledger.overlaps() == []


# -- hundreds of megabytes of output -------------------------------------------------------

HUGE = """objective: a gate printing a lot
milestones:
  - {{name: small, gate: "{gate}"}}
  - {{name: huge, deps: [small], gate: "head -c 300000000 /dev/zero && {gate}"}}
"""


def test_a_gate_printing_300_mb_keeps_the_drivers_memory_bounded(cli_of: Callable[..., CLI], workspace: Path) -> None:
    cli = cli_of()
    cli("init", check=True)
    item, ledger = plan(cli, 0, HUGE)
    baseline = Driver(cli, item, "--until", "small")
    assert baseline.finish(120)[0] == 0  # --until judges `small` and what it depends on: done
    assert ledger.has("end", "small")
    assert baseline.rusage is not None
    driver = Driver(cli, item)
    code, out = driver.finish(300)
    assert code == 0, out
    assert driver.rusage is not None
    # ru_maxrss: the largest resident set of the driver or a child it reaped (KiB on Linux).
    figure("huge output: driver peak memory, small gate (MB)", baseline.rusage.ru_maxrss / 1024)
    figure("huge output: driver peak memory, 300 MB gate (MB)", driver.rusage.ru_maxrss / 1024)
    assert driver.rusage.ru_maxrss < baseline.rusage.ru_maxrss + 100 * 1024
    run = cli.json("runs", "huge", "--item", item)["runs"][-1]
    log = Path(cli.json("log", "huge", "--item", item)["run"]["log_path"])
    try:
        assert log.stat().st_size >= 300_000_000  # all of it streamed to disk
        assert len(run["tail"].encode()) <= 4096 + 64  # the store keeps the tail
    finally:
        log.unlink()
    check_exactly_once(cli, item, ledger, ["small", "huge"])


# -- a driver frozen past its lease ----------------------------------------------------------

FROZEN = """objective: a frozen driver
milestones:
  - {{name: a1, gate: "test $MILEPOST_ATTEMPT = 1 && {gate} || {quick}"}}
  - {{name: b1, deps: [a1], gate: "{quick}"}}
"""


def test_a_frozen_driver_loses_its_milestone_writes_nothing_for_it_and_every_gate_passes_once(
    cli_of: Callable[..., CLI],
) -> None:
    cli = cli_of(MILEPOST_LEASE_TTL="2")
    cli("init", check=True)
    item, ledger = plan(cli, 30, FROZEN)  # the first attempt is long: the other driver meets it running
    frozen = Driver(cli, item)
    other: Driver | None = None
    try:
        wait_until(lambda: ledger.has("start", "a1"), 60, what="the first gate")
        os.kill(frozen.proc.pid, signal.SIGSTOP)
        time.sleep(2 + 1.5)  # past its lease
        other = Driver(cli, item)
        code, out = other.finish(180)
        assert code == 0, out  # it took a1 over (killing the frozen driver's gate) and drove the rest
        os.kill(frozen.proc.pid, signal.SIGCONT)
        frozen_code, frozen_out = frozen.finish(120)
    finally:
        frozen.stop()
        if other is not None:
            other.stop()
    assert frozen_code == 0, frozen_out  # it woke up to find the work done
    assert "internal error" not in frozen_out
    runs = cli.json("runs", "a1", "--item", item)["runs"]
    # Attempt 1 (the frozen driver's) recorded once, by the driver that took it
    # over: killed and run again, or (on a machine so slow that the other
    # driver started after 30 s) recovered from its files as it passed. The
    # frozen one recorded nothing when it woke.
    if runs[0]["outcome"] == "interrupted":
        assert [(r["attempt"], r["outcome"]) for r in runs] == [(1, "interrupted"), (2, "passed")], runs
        assert "expired; killed its process group" in runs[0]["reason"], runs
    else:
        assert [(r["attempt"], r["outcome"]) for r in runs] == [(1, "passed")], runs
        assert "recovered from attempt-1.log" in runs[0]["reason"], runs
    figure(
        "frozen driver: the other took the gate over by killing it (1) or recovering it (0)",
        float(runs[0]["outcome"] == "interrupted"),
    )
    check_exactly_once(cli, item, ledger, ["a1", "b1"])


# -- no Prefect API at all --------------------------------------------------------------------


def test_a_drive_whose_prefect_api_is_gone_from_the_start_is_exit_3_and_runs_nothing(
    cli_of: Callable[..., CLI],
) -> None:
    cli = cli_of()
    cli("init", check=True)
    item, ledger = plan(cli, 0.2)
    nobody = f"http://127.0.0.1:{_free_port()}/api"
    r = cli("drive", item, timeout=120, PREFECT_API_URL=nobody)
    assert r.code == 3, r
    said = f"milepost: error: cannot reach the Prefect API: Failed to reach API at {nobody}/;"
    assert errors(r.err) == [said + " start the workspace's server (milepost server start) or check PREFECT_API_URL"]
    assert ledger.executions() == []
    assert {m["status"] for m in cli.json("list", "--item", item)["milestones"]} == {"pending"}


# -- the Prefect API killed (last: it kills this module's server) ---------------------------


# One process: a drive whose API is killed under it, then a normal drive, then the MCP server's drive
# (milepost.agent.tools.drive). Prefect's settings and logging are checked before, between and after,
# and read during the second drive (at its gate's start): it has its retries and its logs.
ONE_PROCESS = textwrap.dedent(
    """
    import json, logging, os, signal, sys, time, urllib.request
    from pathlib import Path
    from milepost.agent.args import DriveArgs
    from milepost.agent.tools import drive as mcp_drive
    from milepost.errors import PrefectUnreachableError
    from milepost.events import NullReporter
    from milepost.flows.drive import run_drive
    from milepost.flows.prefect_guard import SILENCED
    from milepost.flows.server import server_start, server_status
    from milepost.service import Service
    from prefect.settings import get_current_settings

    home, port, api = Path(sys.argv[1]), int(sys.argv[2]), sys.argv[3]

    def state():
        s = get_current_settings()
        return {
            "settings": s.model_dump(mode="json"),
            "max_retries": s.client.max_retries,
            "raiseExceptions": logging.raiseExceptions,
            "disabled": {n: logging.getLogger(n).disabled for n in SILENCED},
        }

    class Kill(NullReporter):
        def gate_started(self, claim, started=None):
            os.killpg(server_status(home).pid, signal.SIGKILL)

    class Look(NullReporter):
        seen = None
        def gate_started(self, claim, started=None):
            Look.seen = state()

    before, out = state(), {}
    try:
        run_drive(Service.open(), 1, reporter=Kill())
        out["outage"] = "no error"
    except PrefectUnreachableError as e:
        out["outage"] = e.message
    out["after_outage"] = state() == before
    server_start(home, port=port, timeout=240)
    second = run_drive(Service.open(), 1, reporter=Look())
    out["second_ok"], out["during_second"] = second.ok, Look.seen
    out["after_second"] = state() == before
    body = json.dumps({"logs": {"flow_run_id": {"any_": [second.flow_run_id]}}}).encode()
    deadline, logs = time.monotonic() + 60, []
    while not logs and time.monotonic() < deadline:
        req = urllib.request.Request(api + "/logs/filter", body, {"Content-Type": "application/json"})
        logs = json.load(urllib.request.urlopen(req, timeout=10))
        time.sleep(0.25)
    out["second_logs"] = len(logs)
    out["mcp_ok"] = mcp_drive(Service.open(), DriveArgs(item=2))["ok"]
    out["after_mcp"] = state() == before
    out["before"] = before
    print(json.dumps(out))
    """
)


def test_one_process_outage_then_normal_then_mcp_drive_leaves_prefect_as_it_found_it(
    cli_of: Callable[..., CLI], prefect_server: Server
) -> None:
    cli = cli_of(PREFECT_LOGGING_HANDLERS_CONSOLE_LEVEL="CRITICAL", MILEPOST_PREFECT_GRACE="2")
    cli("init", check=True)
    (cli.cwd / "one.yaml").write_text(
        "objective: outage\nmilestones:\n  - {name: a, gate: 'sleep 4'}\n  - {name: b, deps: [a], gate: 'true'}\n"
    )
    (cli.cwd / "two.yaml").write_text("objective: mcp\nmilestones:\n  - {name: c, gate: 'echo hello'}\n")
    assert cli.json("plan", "apply", "one.yaml")["id"] == 1
    assert cli.json("plan", "apply", "two.yaml")["id"] == 2
    args = (str(prefect_server.home), str(prefect_server.port), prefect_server.api_url)
    out = run_script(cli, cli.cwd, ONE_PROCESS, *args, timeout=400)
    assert "stopped answering" in out["outage"], out
    assert out["before"]["max_retries"] > 0 and out["before"]["raiseExceptions"] is True, out
    assert not any(out["before"]["disabled"].values()), out
    # The second drive ran with the client's retries it found at the start (the outage had set them to 0),
    # and its logs reached the API.
    assert out["during_second"]["max_retries"] == out["before"]["max_retries"], out
    assert out["second_ok"] is True and out["second_logs"] > 0, out
    assert out["after_outage"] is True and out["after_second"] is True and out["after_mcp"] is True, out
    assert out["mcp_ok"] is True, out


@pytest.mark.parametrize(
    ("seconds", "grace", "when"),
    [
        # Gates of 8 s, two at once, killed while the first pair runs: the
        # successors wait for an answer (none is claimed while the API does
        # not answer), the loss (10 s grace) ends the drive: exit 3.
        (8, "10", "first pair running"),
        # Killed while a claim is in flight (committed, its gate not started:
        # the loop stalls there until the kill): given back unstarted, exit 3.
        (4, "3", "claim in flight"),
        # Gates of 3 s and a grace longer than the drive, killed while the last
        # gate runs: the loss is seen only at the end (the flow run's final
        # state): the work is done and recorded, exit 0, the flow run's record
        # said to be incomplete.
        (3, "120", "last gate running"),
    ],
)
def test_a_killed_prefect_server_ends_the_drive_within_a_minute_and_costs_no_result(
    cli_of: Callable[..., CLI], prefect_server: Server, seconds: float, grace: str, when: str
) -> None:
    cli = cli_of()
    cli("init", check=True)
    item, ledger = plan(cli, seconds)
    go = cli.cwd.parent / "go"
    stall = {"MILEPOST_STALL_AT": f"flow-claimed:{go}"} if when == "claim in flight" else {}
    driver = Driver(cli, item, "--max-parallel", "2", MILEPOST_PREFECT_GRACE=grace, **stall)
    try:
        stalled = _wait_for(when, cli, item, ledger, driver)
        prefect_server.kill()
        killed = time.monotonic()
        if stalled is not None:  # the stalled claim goes on once the server is gone: it finds the API gone
            wait_until(lambda: not server_status(prefect_server.home).healthy, 30, what="the server gone")
            go.touch()
        code, out = driver.finish(300)
        lost_to_exit = time.monotonic() - killed
    finally:
        driver.stop()
    figure(f"prefect server killed ({when}), gates of {seconds} s: the drive ended after (s)", lost_to_exit)
    ending = "finishes" if when == "last gate running" else "stops"
    assert lost_to_exit < 60, out
    if ending == "stops":
        assert code == 3, out
        errs = errors(out)
        assert len(errs) == 1 and "Prefect API" in errs[0], out
        assert not ledger.has("start", "c"), ledger.lines()  # no claim after the loss
    else:
        assert code == 0, out
        assert "the Prefect API stopped answering" in out, out
        last = [line for line in out.splitlines() if line.strip()][-1]
        assert last.startswith("ok: all 5 milestones are done"), out
        assert "the flow run's record in the Prefect UI is incomplete" in last, out
    assert "Traceback" not in out and "Error logging to API" not in out
    # Every gate that passed is recorded as passed: none runs again.
    for name in NAMES:
        if ledger.has("end", name):
            assert passed_runs(cli, item, name), (name, ledger.lines())
    listed = cli.json("list", "--item", item)["milestones"]
    assert "in_progress" not in {m["status"] for m in listed}, listed
    if stalled is not None:  # the claim in flight was given back, its gate never started
        assert not ledger.has("start", stalled), ledger.lines()
        attempts = json.dumps(cli.json("runs", "--item", item, stalled))
        assert "not started, the Prefect API stopped answering when it was claimed" in attempts, attempts
    # The server back: the next drive finishes.
    prefect_server.up()
    again = cli("drive", item, "--max-parallel", "2", timeout=300)
    assert again.code == 0, again.err
    check_exactly_once(cli, item, ledger, NAMES)


def _wait_for(when: str, cli: CLI, item: str, ledger: Ledger, driver: Driver) -> str | None:
    """Until the moment of the kill: ``when``, in the flow run (the first two
    gates start before Prefect is imported: the flow run must have begun too);
    the milestone whose claim is in flight, if that is the moment."""
    in_flow = lambda: "drive work item" in driver.log.read_text()  # noqa: E731
    if when == "first pair running":
        wait_until(lambda: len(ledger.executions()) >= 2 and in_flow(), 60, what="two gates running in the flow run")
    elif when == "last gate running":
        wait_until(lambda: ledger.has("start", "c") and in_flow(), 120, what="the last gate running")
    else:  # (the stall point writes go.waiting)
        wait_until((cli.cwd.parent / "go.waiting").exists, 120, what="a claim of the flow run's loop in flight")
        listed = cli.json("list", "--item", item)["milestones"]
        stalled = [m["name"] for m in listed if m["status"] == "in_progress" and not ledger.has("start", m["name"])]
        assert len(stalled) == 1, (listed, ledger.lines())
        return stalled[0]
    return None


# -- a gate task that dies before it reports, again and again ------------------------------


def test_a_milestone_whose_gate_task_keeps_dying_before_it_reports_fails_on_the_third_time(tmp_path: Path) -> None:
    from milepost.flows.gate_task import GateSpec
    from milepost.flows.outage import CRASH_LIMIT, crashed_result
    from milepost.graph.models import GateCommand, Milestone
    from milepost.results import Claim

    m = Milestone(id=1, name="flaky-worker", gate=[GateCommand(name="gate", run="true")])
    outcomes = []
    crashes: dict[tuple[int, int], int] = {}  # the drive's count (Loop.crashes)
    for attempt in range(1, CRASH_LIMIT + 2):
        log = tmp_path / f"attempt-{attempt}.log"  # no verdict beside it: the task died first
        claim = Claim(item=99, pk=4242, milestone=m, attempt=attempt, owner="t", log_path=str(log))
        spec = GateSpec(claim=claim, commands=m.gate, cwd=str(tmp_path), env={}, log_path=str(log), stop_file="")
        result = crashed_result(spec, crashes=crashes)
        outcomes.append(result.outcome.value)
        assert "the gate task crashed before reporting" in result.reason
    # Interrupted (no budget) the first times; from the third on a failed attempt: the budget ends the loop.
    assert outcomes == ["interrupted"] * (CRASH_LIMIT - 1) + ["failed", "failed"]

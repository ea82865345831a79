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
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.conftest import CLI, PgCluster, wait_until
from tests.flows.conftest import _free_port
from tests.flows.faults import NAMES, Driver, Server, check_exactly_once, errors, figure, passed_runs, plan

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


@pytest.mark.parametrize(
    ("seconds", "grace", "ending"),
    [
        # Gates of 8 s, two at once: the loss (10 s grace) is seen while the
        # third pair waits: no new claim, exit 3.
        (8, "10", "stops"),
        # Gates of 3 s and a grace longer than the drive: the loss is seen
        # only at the end (the flow run's final state): the work is done and
        # recorded, exit 0, the flow run's record said to be incomplete.
        (3, "120", "finishes"),
    ],
)
def test_a_killed_prefect_server_ends_the_drive_within_a_minute_and_costs_no_result(
    cli_of: Callable[..., CLI], prefect_server: Server, seconds: float, grace: str, ending: str
) -> None:
    cli = cli_of()
    cli("init", check=True)
    item, ledger = plan(cli, seconds)
    driver = Driver(cli, item, "--max-parallel", "2", MILEPOST_PREFECT_GRACE=grace)
    try:
        # (The first two gates start before Prefect is imported: the flow run must have begun too.)
        wait_until(
            lambda: len(ledger.executions()) >= 2 and "drive work item" in driver.log.read_text(),
            60,
            what="two gates running in the flow run",
        )
        prefect_server.kill()
        killed = time.monotonic()
        code, out = driver.finish(300)
        lost_to_exit = time.monotonic() - killed
    finally:
        driver.stop()
    figure(f"prefect server killed, gates of {seconds} s: the drive ended after (s)", lost_to_exit)
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
    # The server back: the next drive finishes.
    prefect_server.up()
    again = cli("drive", item, "--max-parallel", "2", timeout=300)
    assert again.code == 0, again.err
    check_exactly_once(cli, item, ledger, NAMES)


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

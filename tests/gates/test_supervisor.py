"""Gates never outlive their driver: the gate supervisor, with real processes.

A "driver" here is a Python subprocess that runs ``run_gate``; the tests kill
it the way an out-of-memory killer or a CI runner's hard cancel would, freeze
it, kill its supervisor, and look at what is left in /proc.
"""

from __future__ import annotations

import functools
import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from milepost.gates import Outcome, run_gate
from milepost.gates.attempt import AttemptFiles, process_records
from milepost.gates.supervisor import supervisor
from milepost.graph import GateCommand
from milepost.service.takeover import fence
from tests.conftest import wait_until as shared_wait_until

DRIVER = textwrap.dedent(
    """
    import os, sys
    from pathlib import Path
    from milepost.gates import run_gate
    from milepost.graph import GateCommand
    log = Path(sys.argv[1])
    print(os.getpid(), flush=True)
    r = run_gate([GateCommand(run=sys.argv[2])], log, default_cwd=log.parent)
    print(r.outcome.value, r.reason, flush=True)
    """
)


def alive(pid: int) -> bool:
    """A process that runs (a zombie waiting to be reaped has ended)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")


wait_until = functools.partial(shared_wait_until, step=0.02)  # the timings below want a fine step


class Driver:
    """A driver process running one gate whose shell and grandchild write their pids."""

    def __init__(self, tmp_path: Path, command: str | None = None) -> None:
        self.dir = tmp_path
        self.log = tmp_path / "attempt-1.log"
        self.pids = tmp_path / "pids"
        command = command or f"echo $$ >> {self.pids}; sleep 300 & echo $! >> {self.pids}; wait"
        self.proc = subprocess.Popen(
            [sys.executable, "-c", DRIVER, str(self.log), command],
            stdout=subprocess.PIPE,
            text=True,
            start_new_session=True,  # its own group, like a CI job
        )
        assert self.proc.stdout is not None
        self.pid = int(self.proc.stdout.readline())
        wait_until(lambda: self.pids.exists() and len(self.pids.read_text().split()) == 2, 30)

    @property
    def gate_pids(self) -> list[int]:
        return [int(p) for p in self.pids.read_text().split()]

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        if self.proc.stdout is not None:
            self.proc.stdout.close()
        for pid in self.gate_pids if self.pids.exists() else []:
            if alive(pid):
                os.kill(pid, signal.SIGKILL)


@pytest.fixture
def driver(tmp_path: Path) -> Iterator[Driver]:
    d = Driver(tmp_path)
    yield d
    d.close()


def test_sigkill_of_the_driver_kills_its_gate_and_grandchildren_within_a_second(driver: Driver) -> None:
    shell, grandchild = driver.gate_pids
    assert alive(shell) and alive(grandchild)
    os.kill(driver.pid, signal.SIGKILL)
    took = wait_until(lambda: not alive(shell) and not alive(grandchild), timeout=5)
    assert took < 1.5
    files = AttemptFiles(driver.log)
    wait_until(lambda: len(files.processes()) == 2, timeout=5)
    end = files.processes()[1]
    assert end["event"] == "end" and end["killed"] == "its driver stopped"


def test_a_kill_of_the_drivers_whole_process_group_reaches_the_gate_too(driver: Driver) -> None:
    # A CI runner cancelling a job kills its process group: the gate (its own
    # session) and the supervisor (another) are out of that group's reach,
    # and the supervisor must still see its driver go.
    shell, grandchild = driver.gate_pids
    os.killpg(driver.pid, signal.SIGKILL)
    took = wait_until(lambda: not alive(shell) and not alive(grandchild), timeout=5)
    assert took < 1.5


def test_a_frozen_drivers_gate_is_stopped_by_the_fence(driver: Driver) -> None:
    """A driver that is alive but frozen (SIGSTOP) keeps its supervisor's pipe
    open: nothing kills its gate on its own. A reclaimer on the same machine
    does (``fence``), and waits until the group is gone."""
    shell, grandchild = driver.gate_pids
    os.kill(driver.pid, signal.SIGSTOP)
    try:
        time.sleep(0.5)
        assert alive(shell) and alive(grandchild)
        killed = fence(AttemptFiles(driver.log), timeout=10)
        assert killed == [shell]  # the group's id is its leader's pid
        assert not alive(shell) and not alive(grandchild)
        assert fence(AttemptFiles(driver.log)) == []  # nothing left to kill
    finally:
        os.kill(driver.pid, signal.SIGCONT)
    assert driver.proc.stdout is not None
    line = driver.proc.stdout.readline()
    assert line.startswith("failed killed by signal SIGKILL")  # what the woken driver sees


def test_when_the_supervisor_itself_is_killed_the_driver_stops_the_gate(tmp_path: Path) -> None:
    pids = tmp_path / "pids"
    result: dict[str, object] = {}

    def run() -> None:
        r = run_gate(
            [GateCommand(run=f"echo $$ >> {pids}; sleep 300 & echo $! >> {pids}; wait")],
            tmp_path / "attempt-1.log",
            default_cwd=tmp_path,
        )
        result["r"] = r

    t = threading.Thread(target=run)
    t.start()
    wait_until(lambda: pids.exists() and len(pids.read_text().split()) == 2, 30)
    shell, grandchild = (int(p) for p in pids.read_text().split())
    os.kill(supervisor().pid, signal.SIGKILL)
    t.join(10)
    r = result["r"]
    assert r.outcome is Outcome.INTERRUPTED and "supervisor" in r.reason  # type: ignore[attr-defined]
    wait_until(lambda: not alive(shell) and not alive(grandchild), timeout=5)
    # The next gate gets a new supervisor.
    again = run_gate([GateCommand(run="true")], tmp_path / "attempt-2.log", default_cwd=tmp_path)
    assert again.passed


def test_a_quick_command_is_one_message_and_a_long_one_is_announced(tmp_path: Path) -> None:
    """The supervisor tells a command's start only when it still runs after a
    moment (a message less per short gate); its end always carries the pid."""
    sup = supervisor()
    log = tmp_path / "attempt-1.log"
    quick = sup.spawn(["/bin/true"], cwd=str(tmp_path), env={}, log=str(log), proc=str(tmp_path / "q.proc"))
    assert quick.wait(10) and quick.status is not None and quick.status.exit_code == 0
    assert quick.pid == process_records(tmp_path / "q.proc")[0]["pid"]
    slow = sup.spawn(["/bin/sleep", "300"], cwd=str(tmp_path), env={}, log=str(log), proc=str(tmp_path / "s.proc"))
    try:
        assert not slow.wait(0.5)  # it runs: its start was announced meanwhile, on its own pipe
        assert slow.pid == process_records(tmp_path / "s.proc")[0]["pid"] and alive(slow.pid)
    finally:
        slow.kill()
    assert slow.wait(10) and slow.status is not None and slow.status.killed == "interrupted"


def test_each_command_hears_its_own_answer_when_many_run_at_once(tmp_path: Path) -> None:
    """Every spawn carries the pipe its answers come back on: commands ending
    in any order, waited on from several threads, each get their own."""
    sup = supervisor()
    log = str(tmp_path / "attempt-1.log")
    jobs = [
        sup.spawn(["/bin/sh", "-c", f"sleep 0.{(7 * i) % 10}; exit {i}"], cwd=str(tmp_path), env={}, log=log)
        for i in range(12)
    ]
    codes: dict[int, int | None] = {}

    def wait(i: int) -> None:
        assert jobs[i].wait(30)
        codes[i] = jobs[i].status.exit_code if jobs[i].status else None

    threads = [threading.Thread(target=wait, args=(i,)) for i in range(12)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(40)
    assert codes == {i: i for i in range(12)}


def test_a_group_not_yet_announced_is_found_in_its_proc_file(tmp_path: Path) -> None:
    """When the supervisor dies before it announced a command, the driver finds
    the group in the ``.proc`` file (and leaves alone an id that another
    process has taken since)."""
    from milepost.gates.liveness import process_start
    from milepost.gates.supervisor import Job

    ours = subprocess.Popen(["sleep", "300"], start_new_session=True)
    other = subprocess.Popen(["sleep", "300"], start_new_session=True)
    try:
        proc = tmp_path / "attempt-1.proc"
        lines = [
            {"event": "start", "cmd": 0, "pid": ours.pid, "start": process_start(ours.pid)},
            {"event": "start", "cmd": 1, "pid": other.pid, "start": 1},  # another process's start time
        ]
        proc.write_text("".join(json.dumps(r) + "\n" for r in lines))
        for cmd in (0, 1):
            Job(supervisor(), cmd + 1, str(proc), cmd)._kill_here()
        assert ours.wait(10) == -signal.SIGKILL
        time.sleep(0.2)
        assert other.poll() is None
    finally:
        for p in (ours, other):
            p.kill()
            p.wait()


def test_what_a_command_leaves_running_is_stopped_when_it_ends(tmp_path: Path) -> None:
    pidfile = tmp_path / "bg.pid"
    r = run_gate(
        [GateCommand(run=f"trap '' TERM; sleep 300 & echo $! > {pidfile}; echo left it")],
        tmp_path / "attempt-1.log",
        default_cwd=tmp_path,
    )
    assert r.passed and "left it" in r.tail
    assert not alive(int(pidfile.read_text()))  # SIGTERM ignored: SIGKILL after the grace


def test_stop_event_interrupts_the_running_command(tmp_path: Path) -> None:
    stop = threading.Event()
    threading.Timer(0.5, stop.set).start()
    t0 = time.monotonic()
    r = run_gate(
        [GateCommand(name="long", run="sleep 300"), GateCommand(name="after", run="true")],
        tmp_path / "attempt-1.log",
        default_cwd=tmp_path,
        stop=stop,
    )
    assert time.monotonic() - t0 < 10
    assert r.outcome is Outcome.INTERRUPTED and r.reason == "long: interrupted"
    assert [c.outcome for c in r.commands] == [Outcome.INTERRUPTED, Outcome.SKIPPED]


@pytest.mark.parametrize(
    ("command", "env", "why"),
    [
        ("true", {"A=B": "x"}, "cannot start 'gate': illegal environment variable name"),
        ("echo \x00", {}, "cannot start 'gate': embedded null byte"),
        ("true", {"X": "a\x00b"}, "cannot start 'gate': embedded null byte"),
    ],
    ids=["env-key-with-equals", "nul-in-command", "nul-in-env-value"],
)
def test_a_command_that_cannot_start_is_a_failed_attempt(
    tmp_path: Path, command: str, env: dict[str, str], why: str
) -> None:
    r = run_gate([GateCommand(run=command, env=env)], tmp_path / "attempt-1.log", default_cwd=tmp_path)
    assert r.outcome is Outcome.FAILED and r.reason == why
    assert why in (tmp_path / "attempt-1.log").read_text()


def test_an_unwritable_log_folder_is_a_failed_attempt(tmp_path: Path) -> None:
    if os.geteuid() == 0:
        blocker = tmp_path / "logs"
        blocker.write_text("a file where the folder should be")
        log = blocker / "attempt-1.log"
    else:  # pragma: no cover - root ignores permissions
        locked = tmp_path / "locked"
        locked.mkdir(mode=0o500)
        log = locked / "sub" / "attempt-1.log"
    r = run_gate([GateCommand(run="true")], log, default_cwd=tmp_path)
    assert r.outcome is Outcome.FAILED and r.reason.startswith(f"cannot write the gate's log {log}:")


def test_every_start_and_end_is_recorded_beside_the_log(tmp_path: Path) -> None:
    log = tmp_path / "attempt-1.log"
    run_gate([GateCommand(name="one", run="true"), GateCommand(name="two", run="exit 4")], log, default_cwd=tmp_path)
    files = AttemptFiles(log)
    records = files.processes()
    assert [(r["event"], r["cmd"]) for r in records] == [("start", 0), ("end", 0), ("start", 1), ("end", 1)]
    assert records[3]["exit_code"] == 4 and isinstance(records[0]["start"], int) and records[0]["boot"]
    assert json.loads(files.result.read_text())["reason"] == "two: exit 4"


def test_recovery_reads_how_an_attempt_ended_when_its_driver_could_not_say(tmp_path: Path) -> None:
    cmds = [GateCommand(name="one", run="true"), GateCommand(name="two", run="echo fine")]
    log = tmp_path / "attempt-1.log"
    passed = run_gate(cmds, log, default_cwd=tmp_path)
    assert passed.passed
    start = passed.started_at
    files = AttemptFiles(log)
    assert files.recover(cmds, start).outcome is Outcome.PASSED  # from the verdict file
    files.result.unlink()  # the driver died before writing its verdict
    recovered = files.recover(cmds, start)
    assert recovered.outcome is Outcome.PASSED and recovered.reason == "all 2 commands passed"
    # Only the first command had ended: the attempt was cut short.
    lines = files.proc.read_text().splitlines()
    files.proc.write_text("\n".join(lines[:3]) + "\n")
    cut = files.recover(cmds, start)
    assert cut.outcome is Outcome.INTERRUPTED and [c.outcome for c in cut.commands] == [
        Outcome.PASSED,
        Outcome.INTERRUPTED,
    ]


def test_recovery_of_a_gate_killed_with_its_driver_is_interrupted(driver: Driver) -> None:
    os.kill(driver.pid, signal.SIGKILL)
    files = AttemptFiles(driver.log)
    wait_until(lambda: len(files.processes()) == 2, timeout=5)
    r = files.recover([GateCommand(run="x")], started=driver_started())
    assert r.outcome is Outcome.INTERRUPTED and r.reason == "interrupted: its driver stopped"


def driver_started():  # type: ignore[no-untyped-def]
    from datetime import UTC, datetime

    return datetime.now(UTC)

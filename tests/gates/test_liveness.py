"""The one process-liveness helper (milepost.gates.liveness) and what is
built on it: its rules on real processes (a live one, a stopped one, a
zombie, a pid whose /proc entry is missing, a pid given to another
process), the fallback without /proc, process groups, and a lease holder
that is provably gone (milepost.service.takeover.holder_gone)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from milepost.gates import liveness
from milepost.gates.liveness import Life, boot_id, group_alive, life, process_start, still_ours
from milepost.gates.supervisor import own_identity
from milepost.service.takeover import holder_gone
from tests.conftest import wait_until

pytestmark = pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads /proc (Linux)")


def _state(pid: int) -> str:
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]


@pytest.fixture
def sleeper() -> Iterator[subprocess.Popen[bytes]]:
    """A process of its own group, reaped at the end."""
    p = subprocess.Popen(["sleep", "300"], start_new_session=True)
    yield p
    if p.poll() is None:
        p.kill()
    p.wait()


@pytest.fixture
def zombie() -> Iterator[int]:
    """A child that has exited and is not reaped yet (state Z)."""
    p = subprocess.Popen([sys.executable, "-c", "pass"], start_new_session=True)
    wait_until(lambda: _state(p.pid) == "Z", 10)
    yield p.pid
    p.wait()


def _free_pid() -> int:
    """A pid no process can hold: above the kernel's limit."""
    return int(Path("/proc/sys/kernel/pid_max").read_text()) + 1


def test_a_running_process_runs_and_is_known_by_its_start_time(sleeper: subprocess.Popen[bytes]) -> None:
    start = process_start(sleeper.pid)
    assert isinstance(start, int)
    assert life(sleeper.pid) is Life.RUNS
    assert life(sleeper.pid, start) is Life.RUNS
    assert life(os.getpid(), process_start(os.getpid())) is Life.RUNS


def test_a_pid_given_to_another_process_is_gone(sleeper: subprocess.Popen[bytes]) -> None:
    """pid reuse: the recorded start time is not the one the pid has now."""
    start = process_start(sleeper.pid)
    assert start is not None
    assert life(sleeper.pid, start - 1) is Life.GONE
    assert not still_ours(sleeper.pid, start - 1)  # its group is another's now
    assert still_ours(sleeper.pid, start) and still_ours(sleeper.pid, None)


def test_a_stopped_process_runs(sleeper: subprocess.Popen[bytes]) -> None:
    os.kill(sleeper.pid, signal.SIGSTOP)
    wait_until(lambda: _state(sleeper.pid) == "T", 10)
    assert life(sleeper.pid, process_start(sleeper.pid)) is Life.RUNS  # it may be continued
    os.kill(sleeper.pid, signal.SIGCONT)


def test_a_zombie_is_gone_but_keeps_its_start(zombie: int) -> None:
    start = process_start(zombie)
    assert start is not None  # (a record may still name it)
    assert life(zombie) is Life.GONE and life(zombie, start) is Life.GONE
    assert still_ours(zombie, start)  # not another process: its group may have members left


def test_a_pid_without_a_proc_entry_is_gone() -> None:
    pid = _free_pid()
    assert life(pid) is Life.GONE and life(pid, 12345) is Life.GONE
    assert process_start(pid) is None
    assert still_ours(pid, 12345)  # gone, not taken by another process


def test_an_unreadable_entry_proves_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    def denied(pid: int) -> list[bytes] | None:
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(liveness, "_stat", denied)
    assert life(os.getpid()) is Life.UNKNOWN
    assert process_start(os.getpid()) is None
    assert life(0) is Life.UNKNOWN and life(-1) is Life.UNKNOWN  # (no pid at all)


def test_without_proc_a_free_pid_is_gone_and_an_existing_one_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(liveness, "_proc", lambda: False)
    assert life(os.getpid(), 1) is Life.RUNS  # the start time cannot be checked there
    assert life(_free_pid()) is Life.GONE


def test_a_group_of_zombies_has_ended(sleeper: subprocess.Popen[bytes]) -> None:
    assert group_alive(sleeper.pid)
    os.kill(sleeper.pid, signal.SIGKILL)
    wait_until(lambda: _state(sleeper.pid) == "Z", 10)  # not reaped yet: the group's id still answers killpg
    assert not group_alive(sleeper.pid)
    sleeper.wait()
    assert not group_alive(sleeper.pid)


def test_boot_id_is_this_boot() -> None:
    assert boot_id() == Path("/proc/sys/kernel/random/boot_id").read_text().strip()


# -- a lease's holder ----------------------------------------------------------------


def _lease_of(pid: int, start: int | None) -> dict[str, object]:
    return {"host": socket.gethostname(), "boot": boot_id(), "pid": pid, "start": start}


def test_a_lease_holder_is_gone_when_its_process_is(sleeper: subprocess.Popen[bytes], zombie: int) -> None:
    start = process_start(sleeper.pid)
    assert not holder_gone(_lease_of(sleeper.pid, start))  # alive
    assert holder_gone(_lease_of(sleeper.pid, (start or 0) - 1))  # its pid is another process's now
    assert holder_gone(_lease_of(zombie, process_start(zombie)))
    assert holder_gone(_lease_of(_free_pid(), 1))
    assert not holder_gone({**own_identity()})  # this very process


def test_a_lease_holder_elsewhere_proves_nothing() -> None:
    free = _free_pid()
    assert not holder_gone({**_lease_of(free, 1), "host": "another-host"})
    assert not holder_gone({**_lease_of(free, 1), "boot": "another-boot"})
    assert not holder_gone({"host": socket.gethostname(), "pid": free})  # no boot recorded
    assert not holder_gone(None) and not holder_gone({})


def test_the_supervisor_process_reads_the_same_helper(tmp_path: Path) -> None:
    """The gate supervisor runs as ``python -I -S`` its file (no milepost on
    its path) and still finds the helper, beside it."""
    script = Path(liveness.__file__).with_name("_supervisor_main.py")
    code = (
        "import runpy, sys; sys.argv = [sys.argv[1]]; g = runpy.run_path(sys.argv[0]);"
        " boot = open('/proc/sys/kernel/random/boot_id').read().strip();"
        " print(g['process_start'].__module__, g['boot_id']() == boot)"
    )
    t0 = time.monotonic()
    out = subprocess.run([sys.executable, "-I", "-S", "-c", code, str(script)], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["liveness", "True"]
    assert time.monotonic() - t0 < 10

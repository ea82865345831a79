"""Gates never outlive their driver.

A driver process (``milepost drive``, ``milepost done``, a Dask worker running
gate tasks) does not start gate commands itself: it asks its **gate
supervisor**, a small process it starts on first use (``python -I -S``, the
standard library only, a session of its own). The supervisor holds one end
of a socket pair; the driver holds the other. When the driver dies, by any
signal including SIGKILL, the kernel closes the driver's end: the supervisor
sees end of file (or its new parent) and kills every running gate's process
group within about a second. ``PR_SET_PDEATHSIG`` would reach only the
gate's shell, not its grandchildren; the supervisor kills whole groups.

Each command's start (process group, start time, boot id) and end are
appended to the attempt's ``.proc`` file next to its log
(:class:`~milepost.gates.attempt.AttemptFiles`), so a driver that takes
over an expired lease on the same machine can make sure the previous
attempt's processes are gone and read how it ended, even when the driver
that started it is dead (:mod:`milepost.service.takeover`).

The protocol is in ``_supervisor_main.py``; this module is the driver's side.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import itertools
import json
import os
import signal
import socket
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

from milepost.gates.attempt import process_records
from milepost.gates.liveness import boot_id, process_start, still_ours
from milepost.gates.outcome import ExitStatus

__all__ = ["Job", "LaunchError", "Supervisor", "host_identity", "own_identity", "supervisor"]

SCRIPT = Path(__file__).with_name("_supervisor_main.py")


class LaunchError(Exception):
    """The command could not be started (bad environment, missing folder, no
    room for its log): a failed attempt, not a crash."""


class Job:
    """One command sent to the supervisor. Its start is not waited for (a
    round trip per gate, most of a short gate's cost): :meth:`wait` returns
    when the command has ended, or could not start (:attr:`error`).

    The supervisor answers on the socket the two share; the supervisor's
    reader thread (:meth:`Supervisor._read`) hands each answer to its job.
    End of file before the end means the supervisor is gone."""

    def __init__(self, sup: Supervisor, job_id: int, proc: str | None = None, cmd: int = 0) -> None:
        self._sup = sup
        self.id = job_id
        self._proc, self._cmd = proc, cmd
        # Also its process group: once the supervisor says it ended, or that it still runs (after a moment).
        self.pid: int | None = None
        self.start: int | None = None
        self.error: str | None = None  # why it could not start
        self.status: ExitStatus | None = None
        self._ended = threading.Event()

    @property
    def ended(self) -> bool:
        return self._ended.is_set()

    def wait(self, timeout: float | None = None) -> bool:
        """True once the command and whatever it left in its group have
        ended, or once it failed to start."""
        return self._ended.wait(timeout)

    def _take(self, msg: dict[str, Any]) -> bool:
        """One answer of the supervisor; True when it was the last."""
        if "error" in msg:  # it could not start
            self.error = str(msg["error"])
        elif "status" in msg:
            self.status = ExitStatus.from_dict(msg["status"])
            self.pid, self.start = self.status.pid, msg["status"].get("start")
        else:  # it still runs
            self.pid, self.start = int(msg["pid"]), msg.get("start")
            return False
        self._ended.set()
        return True

    def _lost(self) -> None:
        """The supervisor is gone (killed on its own): stop the command here."""
        try:
            self._kill_here()
        finally:
            self.status = ExitStatus(pid=self.pid, killed="the gate supervisor stopped")
            self._ended.set()

    def kill(self, reason: str = "interrupted") -> None:
        """Stop the command's whole group (SIGTERM, SIGKILL after the grace).
        The supervisor reads its requests in order: a kill sent right after
        the spawn reaches the command it started."""
        if not self._sup.send({"op": "kill", "id": self.id, "reason": reason}):
            self._kill_here()

    def _kill_here(self) -> None:
        """The supervisor is gone: SIGKILL the command's group from here,
        found in the ``.proc`` file when its start was not announced yet."""
        pid, start = self.pid, self.start
        if pid is None and self._proc is not None:
            records = process_records(Path(self._proc))
            starts = [r for r in records if r.get("event") == "start" and r.get("cmd") == self._cmd]
            pid, start = (starts[-1].get("pid"), starts[-1].get("start")) if starts else (None, None)
        if isinstance(pid, int) and pid > 0 and still_ours(pid, start):
            _killpg(pid, signal.SIGKILL)


class Supervisor:
    """The driver's handle on its gate supervisor process."""

    def __init__(self) -> None:
        ours, theirs = socket.socketpair()
        self.owner_pid = os.getpid()
        self._proc = subprocess.Popen(
            [sys.executable, "-I", "-S", str(SCRIPT), str(theirs.fileno()), str(os.getpid())],
            pass_fds=(theirs.fileno(),),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,  # out of reach of signals sent to the driver's group
        )
        theirs.close()
        self._sock = ours
        self._send_lock = threading.Lock()
        self._ids = itertools.count(1)
        self._alive = True
        self._jobs: dict[int, Job] = {}  # those not ended, by id (this supervisor's own)
        self._jobs_lock = threading.Lock()
        self._reader = threading.Thread(target=self._read, name="milepost-gate-supervisor", daemon=True)
        self._reader.start()

    @property
    def pid(self) -> int:
        return self._proc.pid

    @property
    def alive(self) -> bool:
        """Whether the supervisor runs (a job that finds it gone says so)."""
        return self._alive and self._proc.poll() is None

    @alive.setter
    def alive(self, value: bool) -> None:
        self._alive = value

    def send(self, msg: dict[str, Any]) -> bool:
        """Send one request; False when the supervisor is gone."""
        data = (json.dumps(msg) + "\n").encode()
        try:
            with self._send_lock:
                self._sock.sendall(data)
        except OSError:
            return False
        return True

    def spawn(
        self,
        argv: list[str],
        *,
        cwd: str,
        env: dict[str, str],
        log: str,
        proc: str | None = None,
        cmd: int = 0,
        timeout: float | None = None,
        grace: float = 2.0,
    ) -> Job:
        """Start ``argv`` in a new session, output appended to ``log``. Returns
        once the request is sent; raises :class:`LaunchError` when the
        supervisor is gone. A command that cannot start ends at once, with
        :attr:`Job.error` set."""
        job = Job(self, next(self._ids), proc, cmd)
        request = {
            "op": "spawn",
            "id": job.id,
            "argv": argv,
            "cwd": cwd,
            "env": env,
            "log": log,
            "proc": proc,
            "cmd": cmd,
            "timeout": timeout,
            "grace": grace,
        }
        with self._jobs_lock:
            self._jobs[job.id] = job
        if not self.send(request):
            with self._jobs_lock:
                self._jobs.pop(job.id, None)
            raise LaunchError("the gate supervisor is not running")
        return job

    def _read(self) -> None:
        """The supervisor's answers, each to its job; at end of file (the
        supervisor gone, or closed), every job not ended is stopped here."""
        try:
            with contextlib.suppress(OSError, ValueError):
                for line in self._sock.makefile("rb"):
                    msg = json.loads(line)
                    with self._jobs_lock:
                        job = self._jobs.get(msg.get("id"))
                    if job is not None and job._take(msg):
                        with self._jobs_lock:
                            self._jobs.pop(job.id, None)
        finally:  # whatever ended the reading: no job waits for an answer nobody reads
            self.alive = False
            with self._jobs_lock:
                left, self._jobs = list(self._jobs.values()), {}
            for job in left:
                job._lost()

    def close(self, timeout: float = 5.0) -> None:
        """Stop the supervisor (it stops whatever still runs) and reap it."""
        self.alive = False
        with contextlib.suppress(OSError):
            # shutdown, not just close: the reader's file object keeps the descriptor open.
            self._sock.shutdown(socket.SHUT_RDWR)
            self._sock.close()
        try:
            self._proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()


class _ThisProcess:
    """This process's gate supervisor: one per process by nature, since it
    watches the process (gates die with it), shared by every drive, ``done``
    and gate task the process runs. Started on first use, again when it
    died; a forked child (another process) starts its own."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.supervisor: Supervisor | None = None

    def get(self) -> Supervisor:
        with self.lock:
            sup = self.supervisor
            if sup is None or not sup.alive or sup.owner_pid != os.getpid():
                if sup is not None and sup.owner_pid == os.getpid():
                    sup.close(timeout=1.0)
                sup = self.supervisor = Supervisor()
            return sup

    def close(self) -> None:
        sup = self.supervisor
        if sup is not None and sup.owner_pid == os.getpid():
            sup.close(timeout=3.0)


_HERE = _ThisProcess()


def supervisor() -> Supervisor:
    """This process's gate supervisor, started on first use (and again if it died)."""
    return _HERE.get()


def _forget_after_fork() -> None:
    # A forked child has its own gates: it starts its own supervisor (and
    # gets a lock no thread of the parent may be holding).
    global _HERE
    _HERE = _ThisProcess()


os.register_at_fork(after_in_child=_forget_after_fork)
atexit.register(lambda: _HERE.close())


def _killpg(pgid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


# -- identity ---------------------------------------------------------------------


def host_identity() -> dict[str, str | None]:
    """This machine as a claim records it: host name and boot id (a process
    id means something only on the same machine, in the same boot). Read
    once per process."""
    return dict(_host())


@functools.cache
def _host() -> dict[str, str | None]:
    return {"host": socket.gethostname(), "boot": boot_id()}


def own_identity() -> dict[str, Any]:
    """This process as a lease or a gate task records it: the host's
    identity, its pid and its start time, read once per process (reading
    ``/proc/self/stat`` of a process with many threads costs milliseconds,
    once per claim it was most of a claim)."""
    return dict(_process(os.getpid()))  # (a forked child is another process: another pid)


@functools.lru_cache(maxsize=1)
def _process(pid: int) -> dict[str, Any]:
    return {**host_identity(), "pid": pid, "start": process_start(pid)}

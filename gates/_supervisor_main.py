"""The gate supervisor process: it starts every gate command of one driver
and kills them all when that driver is gone.

It runs as ``python -I -S _supervisor_main.py FD DRIVER_PID`` in a session of
its own (so signals aimed at the driver's process group, a terminal's Ctrl-C
or a CI runner's group kill, do not reach it), with the standard library
only: it must start in milliseconds. Of milepost it loads one file, the
process facts of ``liveness.py`` beside it (standard library only too).

FD is its end of a Unix socket pair whose other end only the driver holds.
The driver sends JSON lines::

    {"op": "spawn", "id": 1, "argv": [...], "cwd": "...", "env": {...},
     "log": "attempt-1.log", "proc": "attempt-1.proc", "cmd": 0,
     "timeout": 60.0, "grace": 2.0}
    {"op": "kill", "id": 1, "reason": "interrupted"}

and reads back on the same socket, when it has ended, ``{"id": 1, "status":
{"pid": P, "start": T, ...}}``, or ``{"id": 1, "error": "..."}`` when it could not be started.
A command still running ``START_NOTICE_SECONDS`` after its start is also
announced, ``{"id": 1, "pid": P, "start": T}``: most gates of a pipeline end
sooner, and a message less is a wake-up less for the driver's threads. (The
start is in the ``.proc`` file from the first moment, for a driver that must
find the group before it was announced.)

Every command runs in a session (and process group) of its own with its
stdout and stderr appended to its log file. When the command's main process
ends, what it left behind in its group is stopped too (SIGTERM, then SIGKILL
after the grace): an attempt's processes never outlive the attempt. Each
start and end is also appended to the attempt's ``.proc`` file (JSON lines),
so a driver that later reclaims the milestone can find the process group and
the outcome even when the driver that started it is gone.

When the driver is gone (end of file on the socket, or the supervisor has a
new parent: a killed driver's children are re-parented), every running group
gets SIGTERM, SIGKILL half a second later, and the supervisor exits.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import sys
import time
from typing import Any

try:  # imported as a module of milepost (tests)
    from milepost.gates.liveness import boot_id, process_start
except ImportError:  # run as ``python -I -S`` this file: milepost is not on the path, the file beside this one is
    sys.path.append(os.path.dirname(os.path.abspath(__file__)))
    from liveness import boot_id, process_start  # type: ignore[import-not-found,no-redef]

# Signals that must not stop the supervisor: it outlives its driver only long
# enough to stop the gates. (A child gets the default dispositions back.)
IGNORED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT, signal.SIGPIPE)
SHUTDOWN_GRACE = 0.5
POLL_SECONDS = 0.25
START_NOTICE_SECONDS = 0.05


def group_exists(pgid: int) -> bool:
    """Whether the group has any member, a zombie too: cheap, for every
    tick (this process is the subreaper of its gates and reaps them)."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def signal_group(pgid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def become_subreaper() -> None:
    """Orphans of a gate are re-parented here (Linux), so they can be reaped:
    a group of zombies would look alive to ``killpg(pgid, 0)``."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER
    except Exception:
        pass


def append_json(path: str | None, record: dict[str, Any]) -> None:
    if not path:
        return
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            os.write(fd, (json.dumps(record) + "\n").encode())
        finally:
            os.close(fd)
    except OSError:
        pass


class Job:
    def __init__(self, req: dict[str, Any], pid: int, start: int | None) -> None:
        self.id = req["id"]
        self.pid = pid
        self.start = start
        self.proc = req.get("proc")
        self.cmd = req.get("cmd", 0)
        self.timeout: float | None = req.get("timeout")
        self.grace = float(req.get("grace") or 2.0)
        self.began = time.monotonic()
        self.status: int | None = None  # the main process's wait status
        self.timed_out = False
        self.killed: str | None = None  # why the supervisor stopped it
        self.term_sent: float | None = None
        self.kill_sent: float | None = None
        self.announced = False  # its start sent to the driver (see START_NOTICE_SECONDS)

    def stop(self, why: str | None, now: float) -> None:
        if self.killed is None and not self.timed_out:
            self.killed = why
        if self.term_sent is None:
            self.term_sent = now
            signal_group(self.pid, signal.SIGTERM)

    def tick(self, now: float) -> bool:
        """Advance timers; True when the job is over (main process gone, group empty)."""
        running = self.status is None and self.killed is None and not self.timed_out
        if running and self.timeout is not None and now - self.began >= self.timeout:
            self.timed_out = True
            self.stop(None, now)
        if self.status is not None and self.term_sent is None and group_exists(self.pid):
            # The command ended but left processes in its group: stop them too.
            self.term_sent = now
            signal_group(self.pid, signal.SIGTERM)
        if self.term_sent is not None and self.kill_sent is None and now - self.term_sent >= self.grace:
            self.kill_sent = now
            signal_group(self.pid, signal.SIGKILL)
        if self.status is None:
            return False
        if not group_exists(self.pid):
            return True
        # After SIGKILL, give the kernel a moment; then stop waiting (a member
        # in uninterruptible sleep, or a zombie nobody reaps).
        return self.kill_sent is not None and now - self.kill_sent >= 1.0

    def next_deadline(self) -> float | None:
        out: list[float] = []
        if self.status is None and self.timeout is not None and not self.timed_out:
            out.append(self.began + self.timeout)
        if self.term_sent is not None and self.kill_sent is None:
            out.append(self.term_sent + self.grace)
        if self.status is not None:
            out.append(time.monotonic() + 0.02)  # waiting for the group to empty
        elif not self.announced:
            out.append(self.began + START_NOTICE_SECONDS)
        return min(out) if out else None

    def outcome(self) -> dict[str, Any]:
        st = self.status
        code = None
        sig = None
        if st is not None:
            if os.WIFEXITED(st):
                code = os.WEXITSTATUS(st)
            elif os.WIFSIGNALED(st):
                sig = os.WTERMSIG(st)
        return {
            "pid": self.pid,
            "start": self.start,
            "exit_code": code,
            "signal": sig,
            "timed_out": self.timed_out,
            "killed": self.killed,
            "duration": time.monotonic() - self.began,
        }


class Spawner:
    """Starts commands: with ``posix_spawn`` (vfork and exec in C, no Python
    in a forked child: the gate starts in a fraction of the time a fork and
    the child's set-up in Python took) where the C library can start a
    session with it, else by :func:`spawn_forked`."""

    def __init__(self) -> None:
        self.posix = hasattr(os, "posix_spawn") and hasattr(os, "POSIX_SPAWN_OPEN")
        self.home: int | None = None  # the supervisor's own folder, to come back to after a gate's

    def spawn(self, req: dict[str, Any]) -> tuple[int | None, str | None]:
        """Start one command in a new session, its output appended to its log.
        Returns (pid, error)."""
        if not self.posix:
            return spawn_forked(req)
        try:
            return self._posix_spawn(req)
        except NotImplementedError:  # no setsid in this C library's posix_spawn
            self.posix = False
            return spawn_forked(req)

    def _posix_spawn(self, req: dict[str, Any]) -> tuple[int | None, str | None]:
        argv = req["argv"]
        actions = [
            (os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0),
            (os.POSIX_SPAWN_OPEN, 1, req["log"], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644),
            (os.POSIX_SPAWN_DUP2, 1, 2),
        ]
        if self.home is None:
            self.home = os.open(".", os.O_RDONLY)
        try:
            os.chdir(req["cwd"])  # one thread here: the gate's folder for the moment of the spawn
            try:
                pid = os.posix_spawn(
                    argv[0], argv, req.get("env") or {}, file_actions=actions, setsid=True,
                    setsigdef=(*IGNORED, signal.SIGCHLD),
                )  # fmt: skip
            finally:
                os.fchdir(self.home)
        except (OSError, ValueError) as e:
            with contextlib.suppress(OSError):
                fd = os.open(req["log"], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
                try:
                    os.write(fd, f"milepost: cannot start the command: {e}\n".encode(errors="replace"))
                finally:
                    os.close(fd)
            return None, str(e) or type(e).__name__
        return pid, None


def spawn_forked(req: dict[str, Any]) -> tuple[int | None, str | None]:
    """Fork and exec one command in a new session. Returns (pid, error)."""
    argv = req["argv"]
    env = req.get("env") or {}
    rfd, wfd = os.pipe()  # close-on-exec: end of file means the exec happened
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child execs or exits
        try:
            os.close(rfd)
            os.setsid()
            for sig in (*IGNORED, signal.SIGCHLD):
                signal.signal(sig, signal.SIG_DFL)
            signal.set_wakeup_fd(-1)
            null = os.open(os.devnull, os.O_RDONLY)
            os.dup2(null, 0)
            log = os.open(req["log"], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
            os.dup2(log, 1)
            os.dup2(log, 2)
            try:
                os.chdir(req["cwd"])
                os.execve(argv[0], argv, env)
            except BaseException as e:
                msg = f"cannot start the command: {e}"
                os.write(2, f"milepost: {msg}\n".encode(errors="replace"))
                raise
        except BaseException as e:
            try:
                os.write(wfd, (str(e) or type(e).__name__).encode(errors="replace"))
            finally:
                os._exit(127)
    os.close(wfd)
    chunks: list[bytes] = []
    while True:
        chunk = os.read(rfd, 4096)
        if not chunk:
            break
        chunks.append(chunk)
    os.close(rfd)
    if chunks:
        os.waitpid(pid, 0)
        return None, b"".join(chunks).decode(errors="replace")
    return pid, None


class Serving:
    """The supervisor at work: the driver's requests in, its answers out, its
    commands watched until each ends, every one stopped when the driver is gone."""

    def __init__(self, sock: int, driver: int) -> None:
        self.sock, self.driver = sock, driver
        self.boot = boot_id()
        self.spawner = Spawner()
        self.jobs: dict[int, Job] = {}  # pid -> Job
        self.by_id: dict[int, Job] = {}  # request id -> Job
        self.buf = b""
        self.gone = False
        self.wake_r, wake_w = os.pipe()
        os.set_blocking(self.wake_r, False)
        os.set_blocking(wake_w, False)
        signal.set_wakeup_fd(wake_w)
        self.poller = select.poll()
        self.poller.register(sock, select.POLLIN)
        self.poller.register(self.wake_r, select.POLLIN)

    def send(self, msg: dict[str, Any]) -> None:
        data = (json.dumps(msg) + "\n").encode()
        try:
            while data:
                data = data[os.write(self.sock, data) :]
        except OSError:
            pass  # the driver is gone: the end-of-file path stops everything

    def handle(self, req: dict[str, Any]) -> None:
        op = req.get("op")
        if op == "spawn":
            self.spawn(req)
        elif op == "kill":
            target = self.by_id.get(int(req.get("id") or 0))
            if target is not None:
                target.stop(req.get("reason") or "stopped", time.monotonic())

    def spawn(self, req: dict[str, Any]) -> None:
        try:
            pid, error = self.spawner.spawn(req)
        except Exception as e:
            pid, error = None, str(e) or type(e).__name__
        if pid is None:
            self.send({"id": req["id"], "error": error or "could not start"})
            return
        job = Job(req, pid, process_start(pid))
        self.jobs[pid] = job
        self.by_id[job.id] = job
        record = {"event": "start", "cmd": job.cmd, "pid": pid, "start": job.start, "boot": self.boot}
        record["supervisor"] = os.getpid()
        append_json(job.proc, record)

    def reap(self) -> None:
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            job = self.jobs.get(pid)
            if job is not None and job.status is None:
                job.status = status

    def finish_done(self) -> None:
        now = time.monotonic()
        for pid, job in list(self.jobs.items()):
            if not job.announced and job.status is None and now - job.began >= START_NOTICE_SECONDS:
                job.announced = True
                self.send({"id": job.id, "pid": pid, "start": job.start})
            if job.tick(now):
                out = job.outcome()
                append_json(job.proc, {"event": "end", "cmd": job.cmd, **out})
                self.send({"id": job.id, "status": out})
                del self.jobs[pid]
                self.by_id.pop(job.id, None)

    def read_requests(self) -> None:
        try:
            data = os.read(self.sock, 1 << 16)
        except OSError:
            data = b""
        if not data:
            self.gone = True
            return
        *lines, self.buf = (self.buf + data).split(b"\n")
        for line in lines:
            if line.strip():
                self.handle(json.loads(line))

    def drain_wakeups(self) -> None:
        try:
            while os.read(self.wake_r, 512):
                pass
        except BlockingIOError:
            pass

    def step(self) -> None:
        """Wait for a request, a signal or the next deadline; then reap and answer."""
        deadlines = [d for d in (j.next_deadline() for j in self.jobs.values()) if d is not None]
        wait = POLL_SECONDS
        if deadlines:
            wait = max(0.0, min(wait, min(deadlines) - time.monotonic()))
        for fd, _ev in self.poller.poll(int(wait * 1000) + 1):
            if fd == self.wake_r:
                self.drain_wakeups()
            elif fd == self.sock:
                self.read_requests()
        self.reap()
        self.finish_done()
        if not self.gone and os.getppid() != self.driver:
            self.gone = True  # the driver died (its children were re-parented)

    def stop_all(self) -> None:
        """The driver is gone: stop every gate, then leave."""
        now = time.monotonic()
        for job in self.jobs.values():
            job.grace = SHUTDOWN_GRACE
            job.stop("its driver stopped", now)
        deadline = time.monotonic() + SHUTDOWN_GRACE + 1.5
        while self.jobs and time.monotonic() < deadline:
            time.sleep(0.02)
            self.reap()
            self.finish_done()


def main() -> None:
    sock = int(sys.argv[1])
    driver = int(sys.argv[2])
    os.set_inheritable(sock, False)  # never into a gate
    for sig in IGNORED:
        signal.signal(sig, signal.SIG_IGN)
    serving = Serving(sock, driver)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    become_subreaper()
    while not serving.gone:
        serving.step()
    serving.stop_all()


if __name__ == "__main__":
    main()

"""Command gates: run shell commands, record what happened.

A command runs as ``/bin/sh -c RUN`` in its own session (so a timeout or an
interrupt can kill the whole process group), started by this process's gate
supervisor (``milepost.gates.supervisor``) so that it dies with this process,
with its stdout and stderr written straight into the attempt's log file by
the kernel: the output never passes through this process, so a gate printing
100 MB costs no memory here. Afterwards the last few KB are read back from
the file as the evidence tail.

Outcomes are values (:class:`GateResult`); only misuse raises.
"""

from __future__ import annotations

import contextlib
import functools
import os
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from milepost.gates import log_room
from milepost.gates._crash import crash_point
from milepost.gates.attempt import AttemptFiles, read_tail
from milepost.gates.inputs import Fingerprint, Snapshot, changed_paths, describe_changes, gate_fingerprint
from milepost.gates.log_room import command_header
from milepost.gates.outcome import CachedFrom, CommandResult, ExitStatus, GateResult, Outcome, judge, verdict
from milepost.gates.supervisor import LaunchError, supervisor
from milepost.gates.unit_runs import UnitRuns
from milepost.gates.units import UnitBook
from milepost.graph.models import GateCommand
from milepost.graph.words import count

__all__ = ["CommandResult", "GateResult", "Outcome", "command_header", "run_gate"]

# Grace between SIGTERM and SIGKILL when a gate must be stopped.
KILL_GRACE_SECONDS = 2.0
# How often a waiting gate looks at its stop event.
STOP_POLL_SECONDS = 0.2


def _run_one(
    index: int,
    cmd: GateCommand,
    log_fd: int,
    log_path: Path,
    cwd: Path,
    env: Mapping[str, str],
    timeout: float | None,
    stop: threading.Event | None,
    on_interrupt: Callable[[BaseException], None] | None = None,
    watch: Callable[[], str | None] | None = None,
) -> CommandResult:
    log_room.write(log_fd, command_header(cmd))
    start_offset = os.lseek(log_fd, 0, os.SEEK_END)

    def failed(msg: str) -> CommandResult:
        log_room.write(log_fd, f"milepost: {msg}\n")
        return CommandResult(name=cmd.name, run=cmd.run, outcome=Outcome.FAILED, reason=msg, tail=msg)

    if not cwd.is_dir():
        return failed(f"working directory not found: {cwd}")
    try:
        job = supervisor().spawn(
            ["/bin/sh", "-c", cmd.run],
            cwd=str(cwd),
            env=dict(env),
            log=str(log_path),
            proc=str(AttemptFiles(log_path).proc),
            cmd=index,
            timeout=timeout,
            grace=KILL_GRACE_SECONDS,
        )
    except LaunchError as e:
        return failed(f"cannot start {cmd.name!r}: {e}")
    crash_point("gate")
    stopped: str | None = None  # why ``watch`` stopped it
    try:
        while not job.wait(STOP_POLL_SECONDS):
            if stop is not None and stop.is_set():
                job.kill("interrupted")
                job.wait()
            elif watch is not None and stopped is None and (stopped := watch()) is not None:
                job.kill(stopped)
    except BaseException as e:
        # Interrupted (Ctrl-C, SIGTERM): never leave the gate running.
        job.kill("interrupted")
        job.wait(KILL_GRACE_SECONDS + 5)
        if on_interrupt is None or isinstance(e, Exception):
            raise
        on_interrupt(e)  # the command ends interrupted (the rest are skipped)
    if job.error is not None:
        return failed(f"cannot start {cmd.name!r}: {job.error}")
    status = job.status or ExitStatus(pid=job.pid, killed="lost")
    end_offset = os.lseek(log_fd, 0, os.SEEK_END)
    tail = read_tail(log_path, start_offset, end_offset)
    outcome, reason = judge(status, timeout, tail)
    if stopped is not None and status.killed == stopped:
        outcome, reason = Outcome.FAILED, stopped  # (a failure of the command, not an interrupt)
        log_room.write(log_fd, f"\nmilepost: {stopped}; process group killed\n")
    if status.timed_out:
        log_room.write(log_fd, f"\nmilepost: {reason}; process group killed\n")
    outcome, reason = log_room.judge(log_fd, log_path, outcome, reason)
    return CommandResult.ended(cmd.name, cmd.run, status, outcome, reason, tail)


def run_gate(
    commands: Sequence[GateCommand],
    log_path: Path,
    *,
    default_cwd: Path,
    env: Mapping[str, str] | None = None,
    default_timeout: float | None = None,
    stop: threading.Event | None = None,
    on_interrupt: Callable[[BaseException], None] | None = None,
    inputs: Sequence[str] = (),
    root: Path | None = None,
    units: UnitBook | None = None,
    origin: CachedFrom | None = None,
    inherit_env: bool = True,
    watch: Callable[[], str | None] | None = None,
    reuse_units: bool = True,
) -> GateResult:
    """Run the commands of one gate attempt in order; all must pass. After a
    failure the rest are reported as skipped. Output goes to ``log_path``;
    the verdict is also written beside it (:class:`~.attempt.AttemptFiles`).

    With ``inputs`` (patterns relative to ``root``, default ``default_cwd``)
    the attempt's fingerprint is taken before the first command starts (what
    is proven) and its file list written beside the log; after a pass it is
    taken again, and inputs the gate changed itself are named in ``rewrote``.

    The commands run under this process's gate supervisor, so they die with
    this process. Setting ``stop`` (or Ctrl-C) stops the running command's
    whole process group; the attempt is then ``interrupted``. An interrupt
    while a command runs (Ctrl-C, a signal: an exception that is not an
    ``Exception``) stops its group and is raised again, unless
    ``on_interrupt`` takes it: then the attempt ends interrupted, with its
    verdict, and raising it is the caller's.

    A command with ``each`` runs once per file, each run a unit of proof
    (:mod:`.units`): a unit that passed in the same state (``units``, the
    book of this drive and of the store) is not run again and reads
    ``cached``; ``origin`` (this attempt) is where the units run here passed.
    ``reuse_units`` False (``cache: false``, ``--no-cache``, ``--fresh``):
    every unit runs (within the book's workers), none is answered by the
    book or the store, and none is offered to other gates.
    Every unit of the command runs (or is reused) even after one failed, so
    the evidence names each; the commands after it are skipped.

    ``watch``, asked while a command runs (every STOP_POLL_SECONDS), says
    why it must stop (a doer past its budget): its process group is killed
    and the command fails with that reason."""
    started = datetime.now(UTC)
    t0 = time.monotonic()
    try:
        log_path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    except OSError as e:
        reason = f"cannot write the gate's log {log_path}: {e.strerror or e}"
        return GateResult(
            outcome=Outcome.FAILED, reason=reason, tail=reason, started_at=started, finished_at=datetime.now(UTC)
        )
    # (inherit_env False: ``env`` is the whole environment, a doer's: gates/doer_env.py)
    base_env = {**(os.environ if inherit_env else {}), **(env or {})}
    run = _Attempt(fd, log_path, default_cwd, base_env, default_timeout, stop, on_interrupt, units, origin, watch)
    run.reuse_units = reuse_units
    run.where = root or default_cwd
    proven: Fingerprint | None = None
    files = AttemptFiles(log_path)
    try:
        if inputs:
            proven, run.snap = _fingerprint(run.where, inputs, commands, default_timeout, fd)
            if proven is not None:
                files.write_inputs(proven)
        results = run.commands(commands)
        rewrote = _rewrote(run, proven, inputs, commands, results)
    finally:
        os.close(fd)
    result = verdict(results, started, datetime.now(UTC), time.monotonic() - t0, str(log_path))
    if proven is not None:
        result = result.model_copy(
            update={
                "fingerprint": proven.digest,
                "inputs_digest": proven.inputs_digest,
                "inputs_files": len(proven.files),
                "rewrote": rewrote[:20],
            }
        )
    files.write_result(result)
    return result


@dataclass
class _Attempt:
    """What the commands of one attempt run with (see :func:`run_gate`)."""

    fd: int
    log_path: Path
    default_cwd: Path
    base_env: dict[str, str]
    default_timeout: float | None
    stop: threading.Event | None
    on_interrupt: Callable[[BaseException], None] | None
    units: UnitBook | None
    origin: CachedFrom | None
    watch: Callable[[], str | None] | None = None
    where: Path = field(default_factory=Path)
    reuse_units: bool = True
    # The snapshot the inputs' fingerprint was taken with, before any command ran: the first command's
    # units take their digests from it too (a snapshot lists the workspace and reads its environments).
    snap: Snapshot | None = None

    def commands(self, commands: Sequence[GateCommand]) -> list[CommandResult]:
        """Run them in order; after a failure the rest are skipped."""
        results: list[CommandResult] = []
        index = 0  # of the process started (a unit's too), in the supervisor's record
        for cmd in commands:
            if any(not r.outcome.proves for r in results):
                index += max(1, len(cmd.each))
                why = "skipped: an earlier command failed"
                if results[-1].outcome is Outcome.INTERRUPTED:
                    why = "skipped: the attempt was interrupted"
                results.append(CommandResult(name=cmd.name, run=cmd.run, outcome=Outcome.SKIPPED, reason=why))
                continue
            results += self.command(cmd, index)
            index += max(1, len(cmd.each))
        return results

    def command(self, cmd: GateCommand, index: int) -> list[CommandResult]:
        """One command (each of its units, with ``each``), started as process ``index`` of the attempt."""
        cwd = Path(cmd.cwd) if cmd.cwd else self.default_cwd
        if not cwd.is_absolute():
            cwd = self.default_cwd / cwd
        timeout = cmd.timeout if cmd.timeout is not None else self.default_timeout
        run_env = {**self.base_env, **cmd.env}
        if not cmd.each:
            return [
                _run_one(
                    index, cmd, self.fd, self.log_path, cwd, run_env, timeout, self.stop, self.on_interrupt, self.watch
                )
            ]
        one = functools.partial(
            _run_one,
            log_fd=self.fd,
            log_path=self.log_path,
            cwd=cwd,
            env=run_env,
            timeout=timeout,
            stop=self.stop,
            on_interrupt=self.on_interrupt,
        )
        runs = UnitRuns(self.where, self.units, self.origin, self.default_timeout, reuse=self.reuse_units, env=run_env)
        runs.snap = self.snap if index == 0 else None  # (after a command ran, a snapshot afresh)
        return runs.run(cmd, one, index, self.fd, self.stop, self.log_path, self.on_interrupt)


def _rewrote(
    run: _Attempt,
    proven: Fingerprint | None,
    inputs: Sequence[str],
    commands: Sequence[GateCommand],
    results: list[CommandResult],
) -> list[str]:
    """The inputs a passing gate changed itself (taken again after it), noted in its log. A gate whose
    every unit was answered without running (cached) ran nothing that could have changed them."""
    if proven is None or not results or not all(r.outcome.proves for r in results):
        return []
    if all(r.cached_from is not None for r in results):
        return []
    after, _ = _fingerprint(run.where, inputs, commands, run.default_timeout, None)
    if after is None or (after.files == proven.files and after.unreadable == proven.unreadable):
        return []
    rewrote = changed_paths(proven.files, after.files) or sorted(after.unreadable)
    _note(run.fd, f"the gate changed its own inputs: {describe_changes(rewrote)} (its milestone stays stale)")
    return rewrote


def _note(fd: int | None, text: str) -> None:
    if fd is not None:
        with contextlib.suppress(OSError):
            os.write(fd, f"milepost: {text}\n".encode(errors="replace"))


def _fingerprint(
    root: Path, inputs: Sequence[str], commands: Sequence[GateCommand], default_timeout: float | None, fd: int | None
) -> tuple[Fingerprint | None, Snapshot | None]:
    """The inputs' fingerprint now, noted in the log, and the snapshot it was
    taken with; None (and the reason in the log) when it cannot be taken:
    then nothing is proven."""
    try:
        snap = Snapshot(root)
        fp = gate_fingerprint(snap, inputs, commands, default_timeout)
        snap.save()
    except Exception as e:  # the proof is lost, the attempt is not: it still runs and is recorded
        _note(fd, f"could not fingerprint the inputs: {type(e).__name__}: {e}")
        return None, None
    if fp.unreadable:
        _note(fd, f"inputs: {count(len(fp.files), 'file')}; unreadable: {fp.problems()} (nothing is proven on them)")
    else:
        _note(fd, f"inputs: {count(len(fp.files), 'file')}, fingerprint {fp.digest and fp.digest[:12]}")
    return fp, snap

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
import re
import signal
import socket
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path

from milepost.gates import log_room
from milepost.gates._crash import crash_point
from milepost.gates.inputs import (
    Fingerprint,
    Snapshot,
    changed_paths,
    describe_changes,
    manifest_path,
    spec_digest,
    write_manifest,
)
from milepost.gates.log_room import command_header
from milepost.gates.outcome import CachedFrom, CommandResult, GateResult, Outcome
from milepost.gates.supervisor import ExitStatus, LaunchError, read_proc, supervisor
from milepost.gates.unit_runs import UnitRuns
from milepost.gates.units import UnitBook, unit_command
from milepost.graph.models import GateCommand
from milepost.graph.words import count

__all__ = [
    "TAIL_BYTES",
    "CommandResult",
    "GateResult",
    "Outcome",
    "attempt_files",
    "command_header",
    "read_tail",
    "recover_result",
    "run_gate",
    "verdict",
    "write_result",
]

TAIL_BYTES = 4096
# Grace between SIGTERM and SIGKILL when a gate must be stopped.
KILL_GRACE_SECONDS = 2.0
# How often a waiting gate looks at its stop event.
STOP_POLL_SECONDS = 0.2


_TRACEBACK = "Traceback (most recent call last):"


def read_tail(path: Path, start: int = 0, end: int | None = None, limit: int = TAIL_BYTES) -> str:
    """The last ``limit`` bytes of ``path[start:end]``, decoded with replacement.

    A tail cut from longer output opens at a line's start, and at the first
    traceback's start when one is in range (not mid-traceback on a ``^^^^``).
    """
    with open(path, "rb") as f:
        if end is None:
            end = f.seek(0, os.SEEK_END)
        begin = max(start, end - limit)
        # One byte more, to know whether the window opens at a line's start.
        f.seek(max(start, begin - 1))
        data = f.read(end - max(start, begin - 1))
    if begin == start:
        return data.decode("utf-8", errors="replace")
    nl = data.find(b"\n")
    if nl == -1 or not data[nl + 1 :].strip():  # one line longer than the window: keep its end
        return data[1:].decode("utf-8", errors="replace")
    text = data[nl + 1 :].decode("utf-8", errors="replace")
    tb = text.find(_TRACEBACK)
    if tb > 0 and text[tb - 1] == "\n":
        text = text[tb:]
    return text


_NOT_FOUND = re.compile(r"(?:^|\s)(?:sh: \d+: )?([^\s:]+): (?:command )?not found", re.MULTILINE)


def _reason(code: int, tail: str) -> str:
    if code == 0:
        return "exit 0"
    if code < 0:
        return f"killed by signal {_signame(-code)}"
    if code == 127:
        m = _NOT_FOUND.search(tail)
        return f"command not found: {m.group(1)} (exit 127)" if m else "command not found (exit 127)"
    if code == 126:
        return "command not executable (exit 126)"
    if 128 < code < 128 + 65:
        return f"exit {code} (killed by signal {_signame(code - 128)})"
    return f"exit {code}"


def _signame(n: int) -> str:
    try:
        return signal.Signals(n).name
    except ValueError:
        return str(n)


def attempt_files(log_path: Path) -> tuple[Path, Path]:
    """The files beside an attempt's log: its ``.proc`` record (what ran,
    written by the gate supervisor) and its ``.result.json`` (the verdict)."""
    stem = str(log_path).removesuffix(".log")
    return Path(stem + ".proc"), Path(stem + ".result.json")


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
            proc=str(attempt_files(log_path)[0]),
            cmd=index,
            timeout=timeout,
            grace=KILL_GRACE_SECONDS,
        )
    except LaunchError as e:
        return failed(f"cannot start {cmd.name!r}: {e}")
    crash_point("gate")
    try:
        while not job.wait(STOP_POLL_SECONDS):
            if stop is not None and stop.is_set():
                job.kill("interrupted")
                job.wait()
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
    outcome, reason = _judge(status, timeout, tail)
    if status.timed_out:
        log_room.write(log_fd, f"\nmilepost: {reason}; process group killed\n")
    outcome, reason = log_room.judge(log_fd, log_path, outcome, reason)
    return CommandResult(
        name=cmd.name,
        run=cmd.run,
        outcome=outcome,
        exit_code=status.returncode,
        duration=status.duration,
        reason=reason,
        tail=tail,
    )


def _judge(status: ExitStatus, timeout: float | None, tail: str) -> tuple[Outcome, str]:
    """A command's outcome and reason from how it ended."""
    if status.killed is not None:
        return Outcome.INTERRUPTED, "interrupted" if status.killed == "interrupted" else f"interrupted: {status.killed}"
    if status.timed_out:
        return Outcome.FAILED, f"timed out after {timeout:g} s" if timeout is not None else "timed out"
    code = status.returncode
    if code is None:
        return Outcome.INTERRUPTED, "interrupted: no exit status"
    return (Outcome.PASSED if code == 0 else Outcome.FAILED), _reason(code, tail)


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
) -> GateResult:
    """Run the commands of one gate attempt in order; all must pass. After a
    failure the rest are reported as skipped. Output goes to ``log_path``;
    the verdict is also written beside it (``attempt-N.result.json``).

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
    Every unit of the command runs (or is reused) even after one failed, so
    the evidence names each; the commands after it are skipped."""
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
    results: list[CommandResult] = []
    base_env = {**os.environ, **(env or {})}
    proven: Fingerprint | None = None
    where = root or default_cwd
    try:
        if inputs:
            proven = _fingerprint(where, inputs, commands, default_timeout, fd)
            if proven is not None:
                write_manifest(log_path, proven)
        index = 0  # of the process started (a unit's too), in the supervisor's record
        for cmd in commands:
            if any(not r.outcome.proves for r in results):
                index += max(1, len(cmd.each))
                why = "skipped: an earlier command failed"
                if results[-1].outcome is Outcome.INTERRUPTED:
                    why = "skipped: the attempt was interrupted"
                results.append(CommandResult(name=cmd.name, run=cmd.run, outcome=Outcome.SKIPPED, reason=why))
                continue
            cwd = Path(cmd.cwd) if cmd.cwd else default_cwd
            if not cwd.is_absolute():
                cwd = default_cwd / cwd
            timeout = cmd.timeout if cmd.timeout is not None else default_timeout
            run_env = {**base_env, **cmd.env}
            if cmd.each:
                one = functools.partial(_run_one, log_fd=fd, log_path=log_path, cwd=cwd, env=run_env,
                                        timeout=timeout, stop=stop, on_interrupt=on_interrupt)  # fmt: skip
                runs = UnitRuns(where, units, origin, default_timeout)
                results += runs.run(cmd, one, index, fd, stop, log_path, on_interrupt)
                index += len(cmd.each)
                continue
            results.append(_run_one(index, cmd, fd, log_path, cwd, run_env, timeout, stop, on_interrupt))
            index += 1
        rewrote: list[str] = []
        if proven is not None and results and all(r.outcome.proves for r in results):
            after = _fingerprint(where, inputs, commands, default_timeout, None)
            if after is not None and (after.files != proven.files or after.unreadable != proven.unreadable):
                rewrote = changed_paths(proven.files, after.files) or sorted(after.unreadable)
                _note(fd, f"the gate changed its own inputs: {describe_changes(rewrote)} (its milestone stays stale)")
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
    write_result(log_path, result)
    return result


def _note(fd: int | None, text: str) -> None:
    if fd is not None:
        with contextlib.suppress(OSError):
            os.write(fd, f"milepost: {text}\n".encode(errors="replace"))


def _fingerprint(root: Path, inputs: Sequence[str], commands: Sequence[GateCommand], default_timeout: float | None,
                 fd: int | None) -> Fingerprint | None:  # fmt: skip
    """The inputs' fingerprint now, noted in the log; None (and the reason
    in the log) when it cannot be taken: then nothing is proven."""
    try:
        snap = Snapshot(root)
        fp = snap.fingerprint(inputs, spec_digest(commands, default_timeout))
        snap.save()
    except Exception as e:  # the proof is lost, the attempt is not: it still runs and is recorded
        _note(fd, f"could not fingerprint the inputs: {type(e).__name__}: {e}")
        return None
    if fp.unreadable:
        _note(fd, f"inputs: {count(len(fp.files), 'file')}; unreadable: {fp.problems()} (nothing is proven on them)")
    else:
        _note(fd, f"inputs: {count(len(fp.files), 'file')}, fingerprint {fp.digest and fp.digest[:12]}")
    return fp


def verdict(
    results: list[CommandResult], started: datetime, finished: datetime, duration: float, log_path: str | None
) -> GateResult:
    """One gate attempt's result from its commands' results."""
    bad = next((r for r in results if r.outcome in (Outcome.FAILED, Outcome.INTERRUPTED)), None)
    # The verdict speaks for the failing (or interrupted) command, or for the last one when all passed.
    speaker = bad or (results[-1] if results else None)
    if bad is None:
        reason = "exit 0" if len(results) == 1 else f"all {len(results)} commands passed"
        units = [r for r in results if r.file is not None]
        if units:
            plain = len(results) - len(units)
            cached = sum(r.outcome is Outcome.CACHED for r in units)
            parts = [count(plain, "command")] if plain else []
            parts.append(count(len(units), "unit") + (f" ({cached} cached)" if cached else ""))
            reason = "all passed: " + ", ".join(parts)
    else:
        who = f"{bad.name} {bad.file}" if bad.file else bad.name
        reason = bad.reason if len(results) == 1 else f"{who}: {bad.reason}"
    return GateResult(
        outcome=Outcome.PASSED if bad is None else bad.outcome,
        reason=reason,
        exit_code=speaker.exit_code if speaker else 0,
        duration=duration,
        tail=speaker.tail if speaker else "",
        log_path=log_path,
        host=socket.gethostname(),
        started_at=started,
        finished_at=finished,
        commands=results,
    )


def write_result(log_path: Path, result: GateResult) -> None:
    path = attempt_files(log_path)[1]
    tmp = path.with_name(path.name + ".tmp")
    try:
        tmp.write_text(result.model_dump_json())
        tmp.replace(path)
    except OSError:
        # A full disk: the verdict reaches the store from memory (the gate
        # task's box, flows/gate_task.py); only a later recovery from the files would miss it.
        with contextlib.suppress(OSError):
            tmp.unlink()


def recover_result(
    commands: Sequence[GateCommand], log_path: Path, started: datetime, *, default_timeout: float | None = None
) -> GateResult:
    """How an attempt whose driver died ended, from the files beside its log
    (on the machine that ran it): its verdict if its driver wrote one, else
    what its supervisor recorded of each command; a command that did not end
    on its own makes the attempt ``interrupted``. The fingerprint comes from
    the file list written beside the log before the first command started."""
    proc_path, result_path = attempt_files(log_path)
    with contextlib.suppress(OSError, ValueError):
        return GateResult.model_validate_json(result_path.read_text())
    ends = {r.get("cmd"): r for r in read_proc(proc_path) if r.get("event") == "end"}
    tail = ""
    with contextlib.suppress(OSError):
        tail = read_tail(log_path)
    results: list[CommandResult] = []
    # The processes in the order they were started: each command, or each unit of an ``each`` command.
    flat = [u for c in commands for u in ([unit_command(c, f) for f in c.each] or [c])]
    for i, cmd in enumerate(flat):
        end = ends.get(i)
        if end is None:
            results.append(
                CommandResult(name=cmd.name, run=cmd.run, outcome=Outcome.INTERRUPTED, reason="interrupted", tail=tail)
            )
            break
        status = ExitStatus.from_dict(end)
        outcome, reason = _judge(status, cmd.timeout, tail)
        results.append(
            CommandResult(
                name=cmd.name, run=cmd.run, outcome=outcome, exit_code=status.returncode,
                duration=status.duration, reason=reason, tail=tail,
            )
        )  # fmt: skip
        if outcome is not Outcome.PASSED:
            break
    duration = sum(r.duration for r in results)
    out = verdict(results, started, datetime.now(UTC), duration, str(log_path))
    fp = recorded_fingerprint(log_path, commands, default_timeout)
    if fp is not None:
        out = out.model_copy(
            update={"fingerprint": fp.digest, "inputs_digest": fp.inputs_digest, "inputs_files": len(fp.files)}
        )
    return out.model_copy(update={"host": None})


def recorded_fingerprint(
    log_path: Path, commands: Sequence[GateCommand], default_timeout: float | None
) -> Fingerprint | None:
    """The fingerprint an attempt took as it started, from the file list beside its log."""
    import json

    with contextlib.suppress(OSError, ValueError, TypeError, KeyError):
        data = json.loads(manifest_path(log_path).read_text())
        fp = Fingerprint(spec=spec_digest(commands, default_timeout), files=dict(data["files"]))
        if fp.inputs_digest == data["inputs_digest"]:
            return fp
    return None

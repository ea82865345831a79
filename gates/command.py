"""Command gates: run shell commands, record what happened.

A command runs as ``/bin/sh -c RUN`` in its own session (so a timeout or an
interrupt can kill the whole process group), with its stdout and stderr
written straight into the attempt's log file by the kernel: the output never
passes through this process, so a gate printing 100 MB costs no memory here.
Afterwards the last few KB are read back from the file as the evidence tail.

Outcomes are values (:class:`GateResult`); only misuse raises.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from enum import StrEnum
from pathlib import Path

from pydantic import BaseModel, Field

from milepost.graph.models import GateCommand

__all__ = ["TAIL_BYTES", "CommandResult", "GateResult", "Outcome", "read_tail", "run_gate"]

TAIL_BYTES = 4096
# Grace between SIGTERM and SIGKILL when a gate must be stopped.
KILL_GRACE_SECONDS = 2.0


class Outcome(StrEnum):
    PASSED = "passed"
    FAILED = "failed"
    SKIPPED = "skipped"
    INTERRUPTED = "interrupted"


class CommandResult(BaseModel):
    name: str
    run: str
    outcome: Outcome
    exit_code: int | None = None
    duration: float = 0.0
    reason: str
    tail: str = ""


class GateResult(BaseModel):
    """One gate attempt: every command's result, and the verdict."""

    outcome: Outcome
    reason: str
    exit_code: int | None = None
    duration: float = 0.0
    tail: str = ""
    log_path: str | None = None
    started_at: datetime
    finished_at: datetime
    commands: list[CommandResult] = Field(default_factory=list)

    @property
    def passed(self) -> bool:
        return self.outcome is Outcome.PASSED


def read_tail(path: Path, start: int = 0, end: int | None = None, limit: int = TAIL_BYTES) -> str:
    """The last ``limit`` bytes of ``path[start:end]``, decoded with replacement."""
    with open(path, "rb") as f:
        if end is None:
            end = f.seek(0, os.SEEK_END)
        begin = max(start, end - limit)
        f.seek(begin)
        data = f.read(end - begin)
    text = data.decode("utf-8", errors="replace")
    if begin > start:
        # Cut at a line start when one is near, so the tail does not open mid-line.
        nl = text.find("\n")
        if 0 <= nl < 200:
            text = text[nl + 1 :]
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


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM the process group, then SIGKILL whatever is left after a grace."""
    for sig, wait in ((signal.SIGTERM, KILL_GRACE_SECONDS), (signal.SIGKILL, None)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue
    proc.wait()


def _run_one(
    cmd: GateCommand,
    log_fd: int,
    log_path: Path,
    cwd: Path,
    env: Mapping[str, str],
    timeout: float | None,
    on_start: Callable[[subprocess.Popen[bytes]], None] | None,
) -> CommandResult:
    os.write(log_fd, f"=== [{cmd.name}] $ {cmd.run}\n".encode())
    start_offset = os.lseek(log_fd, 0, os.SEEK_END)
    t0 = time.monotonic()
    if not cwd.is_dir():
        msg = f"working directory not found: {cwd}"
        os.write(log_fd, f"milepost: {msg}\n".encode())
        return CommandResult(name=cmd.name, run=cmd.run, outcome=Outcome.FAILED, reason=msg, tail=msg)
    proc = subprocess.Popen(
        ["/bin/sh", "-c", cmd.run],
        stdin=subprocess.DEVNULL,
        stdout=log_fd,
        stderr=subprocess.STDOUT,
        cwd=cwd,
        env=dict(env),
        start_new_session=True,
    )
    if on_start is not None:
        on_start(proc)
    timed_out = False
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        timed_out = True
        _kill_group(proc)
    except BaseException:
        # Interrupted (Ctrl-C, a stop request): never leave the gate running.
        _kill_group(proc)
        raise
    duration = time.monotonic() - t0
    end_offset = os.lseek(log_fd, 0, os.SEEK_END)
    tail = read_tail(log_path, start_offset, end_offset)
    code = proc.returncode
    if timed_out:
        reason = f"timed out after {timeout:g} s"
        os.write(log_fd, f"\nmilepost: {reason}; process group killed\n".encode())
        outcome = Outcome.FAILED
    else:
        reason = _reason(code, tail)
        outcome = Outcome.PASSED if code == 0 else Outcome.FAILED
    return CommandResult(
        name=cmd.name, run=cmd.run, outcome=outcome, exit_code=code, duration=duration, reason=reason, tail=tail
    )


def run_gate(
    commands: Sequence[GateCommand],
    log_path: Path,
    *,
    default_cwd: Path,
    env: Mapping[str, str] | None = None,
    default_timeout: float | None = None,
    on_start: Callable[[subprocess.Popen[bytes]], None] | None = None,
) -> GateResult:
    """Run the commands of one gate attempt in order; all must pass. After a
    failure the rest are reported as skipped. Output goes to ``log_path``."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    started = datetime.now(UTC)
    t0 = time.monotonic()
    results: list[CommandResult] = []
    base_env = {**os.environ, **(env or {})}
    fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        failed = False
        for cmd in commands:
            if failed:
                results.append(
                    CommandResult(
                        name=cmd.name, run=cmd.run, outcome=Outcome.SKIPPED, reason="skipped: an earlier command failed"
                    )
                )
                continue
            cwd = Path(cmd.cwd) if cmd.cwd else default_cwd
            if not cwd.is_absolute():
                cwd = default_cwd / cwd
            timeout = cmd.timeout if cmd.timeout is not None else default_timeout
            r = _run_one(cmd, fd, log_path, cwd, {**base_env, **cmd.env}, timeout, on_start)
            results.append(r)
            failed = r.outcome is not Outcome.PASSED
    finally:
        os.close(fd)
    finished = datetime.now(UTC)
    duration = time.monotonic() - t0
    bad = next((r for r in results if r.outcome is Outcome.FAILED), None)
    # The verdict speaks for the failing command, or for the last one when all passed.
    speaker = bad or (results[-1] if results else None)
    if bad is None:
        reason = "exit 0" if len(results) == 1 else f"all {len(results)} commands passed"
    else:
        reason = bad.reason if len(results) == 1 else f"{bad.name}: {bad.reason}"
    return GateResult(
        outcome=Outcome.PASSED if bad is None else Outcome.FAILED,
        reason=reason,
        exit_code=speaker.exit_code if speaker else 0,
        duration=duration,
        tail=speaker.tail if speaker else "",
        log_path=str(log_path),
        started_at=started,
        finished_at=finished,
        commands=results,
    )

"""What a gate attempt comes to, as values: the outcome, how a command
ended (:class:`ExitStatus`), each command's result and the attempt's, and
the rules between them (:func:`judge`, :func:`verdict`), shared by the
runner (:mod:`.command`) and the recovery of an attempt from its files
(:mod:`.attempt`). Apart from the runner so that reading results costs no
subprocess machinery."""

from __future__ import annotations

import re
import signal
import socket
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Any

from pydantic import BaseModel, Field

from milepost.graph.words import count

__all__ = ["CachedFrom", "CommandResult", "ExitStatus", "GateResult", "Outcome", "judge", "verdict"]


class Outcome(StrEnum):
    PASSED = "passed"
    FAILED = "failed"
    SKIPPED = "skipped"
    INTERRUPTED = "interrupted"
    # Not run: a passed run with the same gate spec and inputs fingerprint stands in for it.
    CACHED = "cached"

    @property
    def proves(self) -> bool:
        """Whether the attempt proves its milestone (it passed, or a passed run stands in)."""
        return self in (Outcome.PASSED, Outcome.CACHED)


class CachedFrom(BaseModel):
    """The passed run a ``cached`` attempt (or unit) reuses."""

    item: int
    milestone: str
    attempt: int

    def shown(self) -> str:
        return f"item {self.item} {self.milestone!r} attempt {self.attempt}"


class CommandResult(BaseModel):
    """One command's result, or one unit's (a command run once per file:
    ``file`` and ``unit``, its digest; ``cached_from`` when an earlier pass
    of the same unit stands in for it)."""

    name: str
    run: str
    outcome: Outcome
    exit_code: int | None = None
    duration: float = 0.0
    reason: str
    tail: str = ""
    file: str | None = None
    unit: str | None = None
    cached_from: CachedFrom | None = None
    ran_because: str | None = None  # a unit that ran: what changed in the code it ran before (gates/unit_blocks.py)

    @classmethod
    def ended(cls, name: str, run: str, status: ExitStatus, outcome: Outcome, reason: str, tail: str) -> CommandResult:
        """A command that ran to its end (or was stopped): its exit status as judged."""
        return cls(
            name=name,
            run=run,
            outcome=outcome,
            exit_code=status.returncode,
            duration=status.duration,
            reason=reason,
            tail=tail,
        )


class GateResult(BaseModel):
    """One gate attempt: every command's result, and the verdict. With
    inputs, ``fingerprint`` is what the attempt ran on (taken as the gate
    started; None when a file could not be read), ``inputs_digest`` keys
    its file list, and ``rewrote`` names inputs the gate itself changed."""

    outcome: Outcome
    reason: str
    exit_code: int | None = None
    duration: float = 0.0
    tail: str = ""
    log_path: str | None = None
    host: str | None = None  # the machine that ran it (its log is there)
    started_at: datetime
    finished_at: datetime
    commands: list[CommandResult] = Field(default_factory=list)
    fingerprint: str | None = None
    inputs_digest: str | None = None
    inputs_files: int | None = None
    rewrote: list[str] = Field(default_factory=list)
    cached_from: CachedFrom | None = None

    @property
    def passed(self) -> bool:
        return self.outcome.proves


@dataclass(frozen=True)
class ExitStatus:
    """How a command ended, as its supervisor saw it (its answer, or the
    end record in the attempt's ``.proc`` file)."""

    pid: int | None
    exit_code: int | None = None
    signal: int | None = None
    timed_out: bool = False
    killed: str | None = None  # why the supervisor stopped it (interrupted, its driver stopped)
    duration: float = 0.0

    @property
    def returncode(self) -> int | None:
        """Like ``Popen.returncode``: the exit code, or minus the signal."""
        if self.exit_code is not None:
            return self.exit_code
        return -self.signal if self.signal is not None else None

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> ExitStatus:
        return cls(
            pid=d.get("pid"),
            exit_code=d.get("exit_code"),
            signal=d.get("signal"),
            timed_out=bool(d.get("timed_out")),
            killed=d.get("killed"),
            duration=float(d.get("duration") or 0.0),
        )


def judge(status: ExitStatus, timeout: float | None, tail: str) -> tuple[Outcome, str]:
    """A command's outcome and reason from how it ended (``tail``: its
    output's end, which names a missing program)."""
    if status.killed is not None:
        return Outcome.INTERRUPTED, "interrupted" if status.killed == "interrupted" else f"interrupted: {status.killed}"
    if status.timed_out:
        return Outcome.FAILED, f"timed out after {timeout:g} s" if timeout is not None else "timed out"
    code = status.returncode
    if code is None:
        return Outcome.INTERRUPTED, "interrupted: no exit status"
    return (Outcome.PASSED if code == 0 else Outcome.FAILED), _reason(code, tail)


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


def verdict(
    results: list[CommandResult], started: datetime, finished: datetime, duration: float, log_path: str | None
) -> GateResult:
    """One gate attempt's result from its commands' results. A command (or unit) skipped with none failed or
    interrupted before it (the attempt was stopped before it began: an interrupt while the gate waited for a
    unit another run had) makes the attempt interrupted: a gate passes only when each of its commands proves."""
    bad = next((r for r in results if r.outcome in (Outcome.FAILED, Outcome.INTERRUPTED)), None)
    skipped = next((r for r in results if r.outcome is Outcome.SKIPPED), None)
    if bad is None and skipped is not None:
        bad = skipped.model_copy(update={"outcome": Outcome.INTERRUPTED})
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

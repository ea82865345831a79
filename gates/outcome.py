"""What a gate attempt comes to, as values: the outcome, each command's
result and the attempt's. Apart from the runner (:mod:`.command`) so that
reading results costs no subprocess machinery."""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum

from pydantic import BaseModel, Field

__all__ = ["CachedFrom", "CommandResult", "GateResult", "Outcome"]


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

"""What a gate attempt comes to, as values: the outcome, each command's
result and the attempt's. Apart from the runner (:mod:`.command`) so that
reading results costs no subprocess machinery."""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum

from pydantic import BaseModel, Field

__all__ = ["CommandResult", "GateResult", "Outcome"]


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
    host: str | None = None  # the machine that ran it (its log is there)
    started_at: datetime
    finished_at: datetime
    commands: list[CommandResult] = Field(default_factory=list)

    @property
    def passed(self) -> bool:
        return self.outcome is Outcome.PASSED

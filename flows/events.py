"""What the drive loop reports. The loop calls a :class:`Reporter`; it never
prints. The CLI's live view, JSON lines and plain lines, the Prefect
artifacts and the tests' recorder are all reporters.

This module imports no Prefect.
"""

from __future__ import annotations

import json
import sys
from datetime import UTC, datetime
from typing import IO, Any, Protocol

from pydantic import BaseModel, Field

from milepost._text import printable
from milepost.results import Claim, DoneResult

__all__ = [
    "DriveSummary",
    "JsonLinesReporter",
    "LineReporter",
    "MilestoneSummary",
    "MultiReporter",
    "NullReporter",
    "RecordingReporter",
    "Reporter",
]


class MilestoneSummary(BaseModel):
    id: int
    name: str
    status: str
    view: str
    attempts: int
    max_attempts: int
    duration: float = 0.0
    last_reason: str | None = None


class DriveSummary(BaseModel):
    """The verdict of one drive: ``ok`` only when every milestone is done."""

    item: int
    objective: str
    ok: bool
    message: str
    flow_run_id: str | None = None
    flow_run_url: str | None = None
    gate_runs: int = 0
    reclaimed: list[str] = Field(default_factory=list)
    interrupted: bool = False
    milestones: list[MilestoneSummary] = Field(default_factory=list)
    duration: float = 0.0


class Reporter(Protocol):
    def drive_started(self, item: int, objective: str, total: int, flow_run_id: str | None) -> None: ...

    def gate_started(self, claim: Claim) -> None: ...

    def gate_finished(self, claim: Claim, done: DoneResult) -> None: ...

    def note(self, message: str) -> None: ...

    def drive_finished(self, summary: DriveSummary) -> None: ...


class NullReporter:
    """Ignores every event; the base of the others (override what you need)."""

    def drive_started(self, item: int, objective: str, total: int, flow_run_id: str | None) -> None:
        pass

    def gate_started(self, claim: Claim) -> None:
        pass

    def gate_finished(self, claim: Claim, done: DoneResult) -> None:
        pass

    def note(self, message: str) -> None:
        pass

    def drive_finished(self, summary: DriveSummary) -> None:
        pass


class MultiReporter(NullReporter):
    def __init__(self, *reporters: Reporter) -> None:
        self.reporters = list(reporters)

    def drive_started(self, item: int, objective: str, total: int, flow_run_id: str | None) -> None:
        for r in self.reporters:
            r.drive_started(item, objective, total, flow_run_id)

    def gate_started(self, claim: Claim) -> None:
        for r in self.reporters:
            r.gate_started(claim)

    def gate_finished(self, claim: Claim, done: DoneResult) -> None:
        for r in self.reporters:
            r.gate_finished(claim, done)

    def note(self, message: str) -> None:
        for r in self.reporters:
            r.note(message)

    def drive_finished(self, summary: DriveSummary) -> None:
        for r in self.reporters:
            r.drive_finished(summary)


class RecordingReporter(NullReporter):
    """Keeps every event: for tests and for the summary."""

    def __init__(self) -> None:
        self.events: list[tuple[str, Any]] = []

    def drive_started(self, item: int, objective: str, total: int, flow_run_id: str | None) -> None:
        self.events.append(("drive_started", item))

    def gate_started(self, claim: Claim) -> None:
        self.events.append(("gate_started", (claim.milestone.name, claim.attempt)))

    def gate_finished(self, claim: Claim, done: DoneResult) -> None:
        self.events.append(("gate_finished", (claim.milestone.name, claim.attempt, done.milestone.status.value)))

    def note(self, message: str) -> None:
        self.events.append(("note", message))

    def drive_finished(self, summary: DriveSummary) -> None:
        self.events.append(("drive_finished", summary.ok))


def _now() -> str:
    return datetime.now(UTC).isoformat()


class JsonLinesReporter(NullReporter):
    """One JSON event per line (``milepost --json drive``)."""

    def __init__(self, out: IO[str] | None = None) -> None:
        self.out = out or sys.stdout

    def _emit(self, event: str, **data: Any) -> None:
        self.out.write(json.dumps({"event": event, "at": _now(), **data}, default=str) + "\n")
        self.out.flush()

    def drive_started(self, item: int, objective: str, total: int, flow_run_id: str | None) -> None:
        self._emit("drive_started", item=item, objective=objective, milestones=total, flow_run_id=flow_run_id)

    def gate_started(self, claim: Claim) -> None:
        self._emit("gate_started", milestone=claim.milestone.name, attempt=claim.attempt, log_path=claim.log_path)

    def gate_finished(self, claim: Claim, done: DoneResult) -> None:
        run = done.gate_run
        self._emit(
            "gate_finished",
            milestone=claim.milestone.name,
            attempt=claim.attempt,
            status=done.milestone.status.value,
            awaiting_review=done.milestone.awaiting_review,
            outcome=run.outcome.value if run else "no_gate",
            reason=run.reason if run else None,
            exit_code=run.exit_code if run else None,
            duration=run.duration if run else 0.0,
        )

    def note(self, message: str) -> None:
        self._emit("note", message=message)

    def drive_finished(self, summary: DriveSummary) -> None:
        self._emit("drive_finished", **summary.model_dump(mode="json"))


class LineReporter(NullReporter):
    """Plain text lines, for logs and pipes."""

    def __init__(self, out: IO[str] | None = None) -> None:
        self.out = out or sys.stdout

    def _line(self, text: str) -> None:
        self.out.write(f"{datetime.now():%H:%M:%S} {printable(text)}\n")
        self.out.flush()

    def drive_started(self, item: int, objective: str, total: int, flow_run_id: str | None) -> None:
        self._line(f"drive work item {item} ({total} milestones): {objective}")

    def gate_started(self, claim: Claim) -> None:
        self._line(f"start  {claim.milestone.name} (attempt {claim.attempt})")

    def gate_finished(self, claim: Claim, done: DoneResult) -> None:
        m, run = done.milestone, done.gate_run
        why = f": {run.reason}" if run and not done.passed else ""
        took = f" in {run.duration:.1f} s" if run else ""
        view = "in_review" if m.awaiting_review else m.status.value
        self._line(f"{view:<6} {m.name} (attempt {claim.attempt}{took}){why}")

    def note(self, message: str) -> None:
        self._line(message)

    def drive_finished(self, summary: DriveSummary) -> None:
        self._line(summary.message)

"""A reporter that keeps what a drive told it: a test double, kept with the tests."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from milepost.events import DriveEvent, DriveSummary, NullReporter
from milepost.gates.outcome import GateResult
from milepost.results import Claim, DoneResult, StaleInfo

__all__ = ["RecordingReporter"]


class RecordingReporter(NullReporter):
    """Keeps every event as ``(DriveEvent, data)``: for tests."""

    def __init__(self) -> None:
        self.events: list[tuple[DriveEvent, Any]] = []
        self.started_at: dict[str, datetime | None] = {}  # per milestone, the start its gate_started told (None: now)

    def drive_started(self, item: int, objective: str, total: int, flow_run_id: str | None) -> None:
        self.events.append((DriveEvent.DRIVE_STARTED, item))

    def lease_reclaimed(self, done: DoneResult, at: datetime | None = None) -> None:
        self.events.append((DriveEvent.LEASE_RECLAIMED, (done.milestone.name, done.gate_run)))

    def stale_found(self, milestone: str, info: StaleInfo, at: datetime | None = None) -> None:
        self.events.append((DriveEvent.STALE_FOUND, (milestone, info.changed)))

    def waiting_for_change(self, milestone: str, reason: str, at: datetime | None = None) -> None:
        self.events.append((DriveEvent.WAITING_FOR_CHANGE, (milestone, reason)))

    def waiting_for_drivers(self, held: dict[str, str]) -> None:
        self.events.append((DriveEvent.WAITING_FOR_DRIVERS, dict(held)))

    def gate_started(self, claim: Claim, started: datetime | None = None) -> None:
        self.events.append((DriveEvent.GATE_STARTED, (claim.milestone.name, claim.attempt, claim.reproof)))
        self.started_at[claim.milestone.name] = started

    def gate_finished(self, claim: Claim, done: DoneResult) -> None:
        self.events.append((DriveEvent.GATE_FINISHED, (claim.milestone.name, claim.attempt, done.milestone.status)))

    def fix_finished(self, claim: Claim, result: GateResult) -> None:
        self.events.append((DriveEvent.FIX_FINISHED, (claim.milestone.name, claim.attempt, result.outcome)))

    def retry_scheduled(self, milestone: str, at: datetime, delay: float) -> None:
        self.events.append((DriveEvent.RETRY_SCHEDULED, (milestone, delay)))

    def warning(self, message: str) -> None:
        self.events.append((DriveEvent.WARNING, message))

    def drive_finished(self, summary: DriveSummary) -> None:
        self.events.append((DriveEvent.DRIVE_FINISHED, summary.ok))

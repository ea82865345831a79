"""What the drive loop reports. The loop calls a :class:`Reporter`; it never
prints. The CLI's live view, JSON lines and plain lines and the Prefect
artifacts are reporters (so is the tests' recorder, in ``tests/``). Every
callback is typed (no free text to parse): :class:`DriveEvent` names them,
and the JSON reporter writes one object per event with ``"event"`` set to
that name.

It sits below the flows that emit these events and the views that show
them (:mod:`milepost.present.live`, :mod:`milepost.present.report`), so
the CLI and the MCP server use them without reaching into the Prefect
layer. It imports no Prefect.
"""

from __future__ import annotations

import json
import sys
from datetime import UTC, datetime
from enum import StrEnum
from typing import IO, Any, Protocol

from pydantic import BaseModel, Field, SerializerFunctionWrapHandler, model_serializer

from milepost._text import holder, printable
from milepost.gates.command import GateResult
from milepost.gates.outcome import CachedFrom
from milepost.graph.status import DisplayStatus, MilestoneStatus
from milepost.graph.words import count
from milepost.results import Claim, DoneResult, DoRun, StaleInfo

__all__ = [
    "DoTotals",
    "DriveEvent",
    "DriveSummary",
    "JsonLinesReporter",
    "LineReporter",
    "MilestoneSummary",
    "MultiReporter",
    "NullReporter",
    "Reporter",
    "cached_text",
]


class DriveEvent(StrEnum):
    """What a reporter hears, in the order a drive can say it."""

    DRIVE_STARTED = "drive_started"
    LEASE_RECLAIMED = "lease_reclaimed"
    STALE_FOUND = "stale_found"
    WAITING_FOR_CHANGE = "waiting_for_change"
    WAITING_FOR_DRIVERS = "waiting_for_drivers"
    GATE_STARTED = "gate_started"
    GATE_FINISHED = "gate_finished"
    FIX_FINISHED = "fix_finished"
    DO_FINISHED = "do_finished"
    RETRY_SCHEDULED = "retry_scheduled"
    WARNING = "warning"
    DRIVE_FINISHED = "drive_finished"


class Failure(BaseModel):
    """Why a milestone of a drive is failed or stuck: its last attempt's
    reason, the last lines of its gate's output (as ``done`` shows them) and
    the path of its log."""

    attempt: int
    reason: str
    last_lines: list[str] = Field(default_factory=list)
    log: str | None = None


class MilestoneSummary(BaseModel):
    id: int
    name: str
    status: MilestoneStatus
    view: DisplayStatus
    attempts: int
    max_attempts: int
    duration: float = 0.0  # gate time in this drive
    total_duration: float = 0.0  # gate time of all its runs, this drive's and earlier ones
    last_attempt: int | None = None  # the number of its last gate run (one sequence across resets)
    last_reason: str | None = None
    stale: StaleInfo | None = None
    waiting_for_change: str | None = None
    cached_from: CachedFrom | None = None  # its attempt in this drive was cached: the passed run that stood in
    failure: Failure | None = None  # failed or stuck: what its last attempt said (else absent from JSON)

    @model_serializer(mode="wrap")
    def _no_empty_failure(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        data: dict[str, Any] = handler(self)
        if data.get("failure") is None:
            data.pop("failure", None)  # a milestone that did not fail says what it always said
        return data


class DoTotals(BaseModel):
    """What the doers of one drive did (docs/doers.md): how many ran, how
    many handed their change to its gate, and what they said they cost
    (``MILEPOST_COST_FILE``; a doer that wrote nothing adds nothing)."""

    runs: int = 0
    passed: int = 0
    cost_usd: float = 0.0
    tokens: int = 0

    def add(self, run: DoRun) -> None:
        self.runs += 1
        self.passed += run.outcome == "passed"
        self.cost_usd = round(self.cost_usd + (run.cost_usd or 0.0), 6)
        self.tokens += run.tokens or 0

    def text(self) -> str:
        """``2 do runs (1 passed), $0.60, 2000 tokens``."""
        return f"{count(self.runs, 'do run')} ({self.passed} passed), ${self.cost_usd:.2f}, {self.tokens} tokens"


class DriveSummary(BaseModel):
    """The verdict of one drive: ``ok`` only when every milestone (of
    ``--until``'s scope) is done and none is stale. ``doers``: what the
    drive's doers did, absent (not even null) when none ran."""

    item: int
    objective: str
    ok: bool
    message: str
    flow_run_id: str | None = None
    flow_run_url: str | None = None
    gate_runs: int = 0  # gates executed
    cached: int = 0  # attempts a passed run on the same gate and inputs stood in for
    until: str | None = None  # --until: the drive judged only this milestone and its deps
    scope: list[str] | None = None
    interrupted: bool = False
    milestones: list[MilestoneSummary] = Field(default_factory=list)
    duration: float = 0.0
    doers: DoTotals | None = None
    # The merged work is on the item's integration branch (docs/doers.md): the line naming the one command
    # that brings it in. Absent when the merges landed on the base branch.
    bring_in: str | None = None
    # The drive lost its Prefect API (its work is recorded; its flow run's record is not): not in JSON, for
    # the CLI to leave without Prefect's drains of what the API will never take (cli._leave_if_prefect_lost).
    prefect_lost: bool = Field(default=False, exclude=True)

    @model_serializer(mode="wrap")
    def _no_empty_doers(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        data: dict[str, Any] = handler(self)
        for key in ("doers", "bring_in"):
            if data.get(key) is None:
                data.pop(key, None)  # a drive without doers says what it always said
        return data


class DriveInterrupted(KeyboardInterrupt):
    """A drive stopped by Ctrl-C (or SIGTERM) after its body summed up: what
    it did and what is left (``summary.interrupted``), for the CLI to show
    before it exits 130."""

    def __init__(self, summary: DriveSummary) -> None:
        super().__init__("interrupted")
        self.summary = summary


class Reporter(Protocol):
    def drive_started(self, item: int, objective: str, total: int, flow_run_id: str | None) -> None: ...

    def lease_reclaimed(self, done: DoneResult, at: datetime | None = None) -> None:
        """A dead driver's attempt was fenced and recorded (``done.gate_run`` says how it ended); ``at``: when
        (None: now; the drive's first look, before Prefect loaded, tells its finds later with their time)."""

    def stale_found(self, milestone: str, info: StaleInfo, at: datetime | None = None) -> None:
        """A done milestone's inputs changed since its proof: the drive re-proves it."""

    def waiting_for_change(self, milestone: str, reason: str, at: datetime | None = None) -> None:
        """A failed milestone's inputs did not change since it failed: the drive does not retry it."""

    def waiting_for_drivers(self, held: dict[str, str]) -> None:
        """Nothing this drive can run: it waits for other live drivers, which hold
        these milestones' leases (milestone -> holder). Said again only when that changes."""

    def gate_started(self, claim: Claim, started: datetime | None = None) -> None:
        """A claimed milestone's gate starts; ``started`` is when its command
        started, when that was before this report (a first gate, started while
        Prefect loaded: flows/early.py), else it starts now."""

    def gate_finished(self, claim: Claim, done: DoneResult) -> None: ...

    def fix_finished(self, claim: Claim, result: GateResult) -> None:
        """The fix hook that follows a failed attempt ran."""

    def do_finished(self, claim: Claim, run: DoRun) -> None:
        """The doer of an attempt ran (docs/doers.md): its gate follows unless ``run`` failed or was refused."""

    def retry_scheduled(self, milestone: str, at: datetime, delay: float) -> None:
        """A failed milestone waits ``delay`` seconds (until ``at``) before its next attempt."""

    def warning(self, message: str) -> None:
        """Something went wrong beside the work (the flow-run graph, say); the drive goes on."""

    def drive_finished(self, summary: DriveSummary) -> None: ...


class NullReporter:
    """Ignores every event; the base of the others (override what you need)."""

    def drive_started(self, item: int, objective: str, total: int, flow_run_id: str | None) -> None:
        pass

    def lease_reclaimed(self, done: DoneResult, at: datetime | None = None) -> None:
        pass

    def stale_found(self, milestone: str, info: StaleInfo, at: datetime | None = None) -> None:
        pass

    def waiting_for_change(self, milestone: str, reason: str, at: datetime | None = None) -> None:
        pass

    def waiting_for_drivers(self, held: dict[str, str]) -> None:
        pass

    def gate_started(self, claim: Claim, started: datetime | None = None) -> None:
        pass

    def gate_finished(self, claim: Claim, done: DoneResult) -> None:
        pass

    def fix_finished(self, claim: Claim, result: GateResult) -> None:
        pass

    def do_finished(self, claim: Claim, run: DoRun) -> None:
        pass

    def retry_scheduled(self, milestone: str, at: datetime, delay: float) -> None:
        pass

    def warning(self, message: str) -> None:
        pass

    def drive_finished(self, summary: DriveSummary) -> None:
        pass


class MultiReporter(NullReporter):
    def __init__(self, *reporters: Reporter) -> None:
        self.reporters = list(reporters)

    def drive_started(self, item: int, objective: str, total: int, flow_run_id: str | None) -> None:
        for r in self.reporters:
            r.drive_started(item, objective, total, flow_run_id)

    def lease_reclaimed(self, done: DoneResult, at: datetime | None = None) -> None:
        for r in self.reporters:
            r.lease_reclaimed(done, at)

    def stale_found(self, milestone: str, info: StaleInfo, at: datetime | None = None) -> None:
        for r in self.reporters:
            r.stale_found(milestone, info, at)

    def waiting_for_change(self, milestone: str, reason: str, at: datetime | None = None) -> None:
        for r in self.reporters:
            r.waiting_for_change(milestone, reason, at)

    def waiting_for_drivers(self, held: dict[str, str]) -> None:
        for r in self.reporters:
            r.waiting_for_drivers(held)

    def gate_started(self, claim: Claim, started: datetime | None = None) -> None:
        for r in self.reporters:
            r.gate_started(claim, started)

    def gate_finished(self, claim: Claim, done: DoneResult) -> None:
        for r in self.reporters:
            r.gate_finished(claim, done)

    def fix_finished(self, claim: Claim, result: GateResult) -> None:
        for r in self.reporters:
            r.fix_finished(claim, result)

    def do_finished(self, claim: Claim, run: DoRun) -> None:
        for r in self.reporters:
            r.do_finished(claim, run)

    def retry_scheduled(self, milestone: str, at: datetime, delay: float) -> None:
        for r in self.reporters:
            r.retry_scheduled(milestone, at, delay)

    def warning(self, message: str) -> None:
        for r in self.reporters:
            r.warning(message)

    def drive_finished(self, summary: DriveSummary) -> None:
        for r in self.reporters:
            r.drive_finished(summary)


def cached_text(src: CachedFrom) -> str:
    """The passed run a cached attempt reused, as people read it: ``item 1 'leaf' attempt 2``."""
    return f"item {src.item} {src.milestone!r} attempt {src.attempt}"


class _Clock:
    """The stamps of one reporter's lines, in the order they are told: each
    event at the time it happened, except that a stamp never goes back (an
    event told after a later one, such as a gate's end the loop reads while
    it starts the next gate, is stamped with the later one's time). The
    opening event is stamped with ``started``, the drive's start, when given."""

    def __init__(self, started: datetime | None) -> None:
        self.started = started
        self.last: datetime | None = None

    def stamp(self, at: datetime | None = None) -> datetime:
        when = at if at is not None else datetime.now(UTC)
        if self.last is not None and when < self.last:
            when = self.last
        self.last = when
        return when


class JsonLinesReporter(NullReporter):
    """One JSON object per event and line (``milepost --json drive``)."""

    def __init__(self, out: IO[str] | None = None, started: datetime | None = None) -> None:
        self.out = out or sys.stdout
        self.clock = _Clock(started)  # ``at`` never goes back (see _Clock); the opening at the drive's start

    def _emit(self, event: DriveEvent, at: datetime | None = None, **data: Any) -> None:
        when = self.clock.stamp(at).isoformat()
        self.out.write(json.dumps({"event": event.value, "at": when, **data}, default=str) + "\n")
        self.out.flush()

    def drive_started(self, item: int, objective: str, total: int, flow_run_id: str | None) -> None:
        self._emit(
            DriveEvent.DRIVE_STARTED,
            at=self.clock.started,
            item=item,
            objective=objective,
            milestones=total,
            flow_run_id=flow_run_id,
        )

    def lease_reclaimed(self, done: DoneResult, at: datetime | None = None) -> None:
        run = done.gate_run
        self._emit(
            DriveEvent.LEASE_RECLAIMED,
            at=at,
            milestone=done.milestone.name,
            attempt=run.attempt if run else None,
            outcome=run.outcome.value if run else None,
            reason=run.reason if run else None,
            status=done.milestone.status.value,
        )

    def stale_found(self, milestone: str, info: StaleInfo, at: datetime | None = None) -> None:
        self._emit(DriveEvent.STALE_FOUND, at=at, milestone=milestone, **info.model_dump())

    def waiting_for_change(self, milestone: str, reason: str, at: datetime | None = None) -> None:
        self._emit(DriveEvent.WAITING_FOR_CHANGE, at=at, milestone=milestone, reason=reason)

    def waiting_for_drivers(self, held: dict[str, str]) -> None:
        self._emit(DriveEvent.WAITING_FOR_DRIVERS, milestones=list(held), holders=held)

    def gate_started(self, claim: Claim, started: datetime | None = None) -> None:
        self._emit(
            DriveEvent.GATE_STARTED,
            at=started,
            milestone=claim.milestone.name,
            attempt=claim.attempt,
            reproof=claim.reproof,
            log_path=claim.log_path,
        )

    def gate_finished(self, claim: Claim, done: DoneResult) -> None:
        run = done.gate_run
        self._emit(
            DriveEvent.GATE_FINISHED,
            at=run.finished_at if run else None,
            milestone=claim.milestone.name,
            attempt=claim.attempt,
            status=done.milestone.status.value,
            awaiting_review=done.milestone.awaiting_review,
            outcome=run.outcome.value if run else "no_gate",
            reason=run.reason if run else None,
            exit_code=run.exit_code if run else None,
            duration=run.duration if run else 0.0,
            cached_from=run.cached_from.model_dump() if run and run.cached_from else None,
        )

    def fix_finished(self, claim: Claim, result: GateResult) -> None:
        self._emit(
            DriveEvent.FIX_FINISHED,
            milestone=claim.milestone.name,
            attempt=claim.attempt,
            outcome=result.outcome.value,
            reason=result.reason,
            log_path=result.log_path,
        )

    def do_finished(self, claim: Claim, run: DoRun) -> None:
        self._emit(
            DriveEvent.DO_FINISHED,
            milestone=claim.milestone.name,
            attempt=claim.attempt,
            outcome=run.outcome,
            reason=run.reason,
            duration=round(run.duration, 3),
            diff_stat=run.diff_stat,
            files=run.files,
            cost_usd=run.cost_usd,
            tokens=run.tokens,
            session=run.session,
            usage_warning=run.usage_warning,
            log_path=run.log_path,
        )

    def retry_scheduled(self, milestone: str, at: datetime, delay: float) -> None:
        self._emit(DriveEvent.RETRY_SCHEDULED, milestone=milestone, retry_at=at.isoformat(), delay=round(delay, 3))

    def warning(self, message: str) -> None:
        self._emit(DriveEvent.WARNING, message=message)

    def drive_finished(self, summary: DriveSummary) -> None:
        self._emit(DriveEvent.DRIVE_FINISHED, **summary.model_dump(mode="json"))


def _attempt(claim: Claim) -> str:
    """``attempt 2``; ``no gate`` for a milestone without one (done with no attempt, as ``done`` says)."""
    return f"attempt {claim.attempt}" if claim.milestone.gate or claim.milestone.do else "no gate"


class LineReporter(NullReporter):
    """Plain text lines, for logs and pipes."""

    def __init__(self, out: IO[str] | None = None, started: datetime | None = None) -> None:
        self.out = out or sys.stdout
        self.clock = _Clock(started)  # stamps never go back (see _Clock); the opening at the drive's start

    def _line(self, text: str, at: datetime | None = None) -> None:
        """A line stamped with the local time it happened: ``at`` (aware), else now (see _Clock)."""
        when = self.clock.stamp(at).astimezone()
        self.out.write(f"{when:%H:%M:%S} {printable(text)}\n")
        self.out.flush()

    def drive_started(self, item: int, objective: str, total: int, flow_run_id: str | None) -> None:
        self._line(f"drive work item {item} ({count(total, 'milestone')}): {objective}", self.clock.started)

    def lease_reclaimed(self, done: DoneResult, at: datetime | None = None) -> None:
        why = done.gate_run.reason if done.gate_run else "its driver stopped"
        self._line(f"reclaimed {done.milestone.name}: {why}", at)

    def stale_found(self, milestone: str, info: StaleInfo, at: datetime | None = None) -> None:
        self._line(f"stale  {milestone}: {info.reason}", at)

    def waiting_for_change(self, milestone: str, reason: str, at: datetime | None = None) -> None:
        self._line(f"held   {milestone}: {reason}", at)

    def waiting_for_drivers(self, held: dict[str, str]) -> None:
        self._line(f"wait   for other drivers: {', '.join(f'{n} ({holder(h)})' for n, h in held.items())}")

    def gate_started(self, claim: Claim, started: datetime | None = None) -> None:
        what = "re-prove" if claim.reproof else "start "
        self._line(f"{what} {claim.milestone.name} ({_attempt(claim)})", started)

    def gate_finished(self, claim: Claim, done: DoneResult) -> None:
        m, run = done.milestone, done.gate_run
        why = f": {run.reason}" if run and not done.passed else ""
        took = f" in {run.duration:.1f} s" if run else ""
        if run is not None and run.cached_from is not None:  # not run: a passed run stood in
            took = f", cached from {cached_text(run.cached_from)}"
        elif run is not None and (units := [c for c in run.commands if c.file is not None]):
            reused = sum(c.cached_from is not None for c in units)
            took += f"; {count(len(units), 'unit')}" + (f", {reused} cached" if reused else "")
        view = "in_review" if m.awaiting_review else m.status.value
        self._line(f"{view:<6} {m.name} ({_attempt(claim)}{took}){why}", run.finished_at if run else None)

    def fix_finished(self, claim: Claim, result: GateResult) -> None:
        self._line(f"fix of {claim.milestone.name} after attempt {claim.attempt}: {result.reason}")

    def do_finished(self, claim: Claim, run: DoRun) -> None:
        what = f"; {run.diff_stat.strip()}" if run.diff_stat else ""
        cost = f", ${run.cost_usd:.2f}" if run.cost_usd is not None else ""
        cost += f", {run.tokens} tokens" if run.tokens is not None else ""
        took = f"attempt {claim.attempt} in {run.duration:.1f} s{cost}"
        self._line(f"do     {claim.milestone.name} ({took}): {run.reason}{what}")
        if run.usage_warning:
            self._line(f"warning: {claim.milestone.name}: its doer's usage report was not read: {run.usage_warning}")

    def retry_scheduled(self, milestone: str, at: datetime, delay: float) -> None:
        self._line(f"retry of {milestone} in {delay:.1f} s")

    def warning(self, message: str) -> None:
        self._line(f"warning: {message}")

    def drive_finished(self, summary: DriveSummary) -> None:
        self._line(summary.message)

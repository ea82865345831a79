"""The live terminal view of a drive: a rich table of milestones whose
statuses update as gates start and finish, with the running gates and the
elapsed time."""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import Any

from rich.console import Console, Group
from rich.live import Live
from rich.table import Table
from rich.text import Text

from milepost._text import holder, printable
from milepost.events import DriveSummary
from milepost.gates.command import GateResult
from milepost.present.diagram import PALETTE
from milepost.results import Claim, DoneResult, DoRun, MilestoneView, StaleInfo


class LiveReporter:
    def __init__(self, console: Console, views: list[MilestoneView]) -> None:
        self.console = console
        self.rows: dict[str, list[Any]] = {v.name: [v.id, v.view, v.attempts, v.max_attempts, ""] for v in views}
        self.running: dict[str, float] = {}
        self.t0 = time.monotonic()
        self.notes: list[str] = []
        self.live = Live(self._render(), console=console, refresh_per_second=4, get_renderable=self._render)

    def _render(self) -> Group:
        t = Table(box=None, header_style="bold")
        for col in ("id", "milestone", "status", "budget", "note"):
            t.add_column(col)
        for name, (mid, view, attempts, most, note) in sorted(self.rows.items(), key=lambda kv: int(kv[1][0])):
            t.add_row(
                str(mid),
                name,
                Text(str(view), style=PALETTE[view].term if view in PALETTE else ""),
                f"{attempts}/{most}",
                printable(str(note)),
            )
        now = time.monotonic()
        running = ", ".join(f"{n} ({now - t:.0f} s)" for n, t in self.running.items()) or "-"
        head = Text(f"elapsed {now - self.t0:.0f} s · running: {running}", style="bold")
        return Group(head, t, *(Text(printable(n), style="dim") for n in self.notes[-3:]))

    def show(self) -> None:
        """Show the table (from the drive's start: its first gates run before
        Prefect loads, flows/early.py). Idempotent."""
        if not self.live.is_started:
            self.live.start()

    def drive_started(self, item: int, objective: str, total: int, flow_run_id: str | None) -> None:
        self.show()

    def gate_started(self, claim: Claim, started: datetime | None = None) -> None:
        before = (datetime.now(UTC) - started).total_seconds() if started is not None else 0.0
        self.running[claim.milestone.name] = time.monotonic() - max(0.0, before)
        self.rows[claim.milestone.name][1] = "running"
        if claim.reproof:
            self.rows[claim.milestone.name][4] = "re-proof"

    def gate_finished(self, claim: Claim, done: DoneResult) -> None:
        m = done.milestone
        self.running.pop(m.name, None)
        row = self.rows[m.name]
        row[1] = "in_review" if m.awaiting_review else m.status.value
        row[2] = m.attempts
        row[4] = done.gate_run.reason if done.gate_run and (not done.passed or done.gate_run.cached_from) else ""
        for ch in done.changes[1:]:  # reopened behind it
            if ch.milestone in self.rows:
                self.rows[ch.milestone][1] = "blocked" if ch.to_status == "pending" else ch.to_status.value
                self.rows[ch.milestone][4] = ch.reason or ""

    def stale_found(self, milestone: str, info: StaleInfo, at: datetime | None = None) -> None:
        if milestone in self.rows:
            self.rows[milestone][1] = "stale"
            self.rows[milestone][4] = info.reason

    def waiting_for_change(self, milestone: str, reason: str, at: datetime | None = None) -> None:
        if milestone in self.rows:
            self.rows[milestone][4] = reason

    def waiting_for_drivers(self, held: dict[str, str]) -> None:
        for name, owner in held.items():
            if name in self.rows:
                self.rows[name][1], self.rows[name][4] = "in_progress", f"held by {holder(owner)}"
        self.notes.append(f"waiting for other drivers: {', '.join(held)}")

    def lease_reclaimed(self, done: DoneResult, at: datetime | None = None) -> None:
        why = done.gate_run.reason if done.gate_run else "its driver stopped"
        self.notes.append(f"reclaimed {done.milestone.name}: {why}")
        self.rows[done.milestone.name][1] = done.milestone.status.value

    def fix_finished(self, claim: Claim, result: GateResult) -> None:
        self.notes.append(f"fix of {claim.milestone.name} after attempt {claim.attempt}: {result.reason}")

    def do_finished(self, claim: Claim, run: DoRun) -> None:
        if claim.milestone.name in self.rows:
            self.rows[claim.milestone.name][4] = f"do: {run.reason}"
        if run.outcome != "passed":
            self.notes.append(f"do of {claim.milestone.name} (attempt {claim.attempt}): {run.reason}")
        if run.usage_warning:
            name = claim.milestone.name
            self.notes.append(f"warning: {name}: its doer's usage report was not read: {run.usage_warning}")

    def retry_scheduled(self, milestone: str, at: datetime, delay: float) -> None:
        self.rows[milestone][4] = f"retry in {delay:.1f} s"

    def warning(self, message: str) -> None:
        self.notes.append(f"warning: {message}")

    def drive_finished(self, summary: DriveSummary) -> None:
        self.stop()

    def stop(self) -> None:
        """Leave the terminal as it was (also when the drive ends by an error or Ctrl-C). Idempotent."""
        self.live.stop()

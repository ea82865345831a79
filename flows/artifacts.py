"""Prefect artifacts of a drive: a progress artifact updated as milestones
finish, and at the end a markdown summary with the DAG as a picture (an SVG
image given as a ``data:`` URI: the Prefect UI renders images in markdown,
not Mermaid, and strips inline ``<svg>``), a table of milestones (status,
attempts, last reason) and, when doers ran, a table of their attempts (cost,
tokens, agent session)."""

from __future__ import annotations

import contextlib
import importlib
import json
import threading
from collections.abc import Callable, Mapping
from typing import Any
from uuid import UUID

from prefect.client.orchestration import SyncPrefectClient, get_client
from prefect.client.schemas.actions import ArtifactCreate, ArtifactUpdate

from milepost.events import DriveSummary, NullReporter, cached_text
from milepost.graph.dag import WorkGraph
from milepost.graph.status import MilestoneStatus
from milepost.graph.words import count
from milepost.present.picture import svg_data_uri, to_svg
from milepost.results import Claim, DoneResult, DoRun

__all__ = ["ArtifactReporter", "do_rows"]

PROGRESS_INTERVAL = 1.0
# Past this the picture stays out of the artifact (`milepost graph --format svg` draws it).
MAX_PICTURE_BYTES = 4 * 1024 * 1024


def _import_quietly(*names: str) -> None:
    for name in names:
        with contextlib.suppress(Exception):
            importlib.import_module(name)


def _picture(summary: DriveSummary, graph: WorkGraph, durations: Mapping[str, float] | None) -> str:
    svg = to_svg(graph, f"work item {summary.item}: {summary.objective}", durations=durations)
    if len(svg) > MAX_PICTURE_BYTES:
        return f"(the DAG is too large to embed here: `milepost graph {summary.item} --format html -o dag.html`)"
    return f"![the milestone DAG of work item {summary.item}]({svg_data_uri(svg)})"


def counts_line(done: int, total: int, gate_runs: int, cached: int) -> str:
    """The summary's line of counts: ``1 of 2 milestones done, 1 gate run, 1 cached in this drive.``"""
    cached_part = f", {cached} cached" if cached else ""
    return f"{done} of {count(total, 'milestone')} done, {count(gate_runs, 'gate run')}{cached_part} in this drive."


def do_rows(runs: list[DoRun]) -> list[dict[str, Any]]:
    """The do runs' table in the UI: each doer's outcome, cost, tokens and agent session."""
    return [
        {
            "milestone": r.milestone,
            "attempt": r.attempt,
            "outcome": r.outcome,
            "cost_usd": r.cost_usd,
            "tokens": r.tokens,
            "session": r.session or "",
            "reason": r.reason,
            "usage_warning": r.usage_warning or "",
        }
        for r in runs
    ]


class ArtifactReporter(NullReporter):
    """The drive's artifacts, attached to its flow run. They are made by
    threads of their own with clients of their own, so the drive never waits
    on the API for them: the progress artifact by :class:`_Progress`, the
    summary by :meth:`publish_later` while the flow run ends."""

    def __init__(
        self, item: int, total: int, flow_run_id: str, durations: Callable[[int], Mapping[str, float]] | None = None
    ) -> None:
        self.item = item
        self.flow_run_id = UUID(flow_run_id)
        self.durations = durations  # the gates' last run times, for the picture's critical path
        self.total = max(total, 1)
        self.finished: set[str] = set()
        self.do_runs: list[DoRun] = []  # the doers of this drive, as they ended (docs/doers.md)
        self.progress = _Progress(item, self.flow_run_id)
        # The picture's layout imports grandalf: while the gates run, not at the end.
        threading.Thread(target=_import_quietly, args=("grandalf.layouts",), daemon=True).start()

    @property
    def progress_id(self) -> UUID | None:
        return self.progress.id

    def gate_finished(self, claim: Claim, done: DoneResult) -> None:
        if done.milestone.status.is_done:
            self.finished.add(done.milestone.name)
        self.progress.set(100.0 * len(self.finished) / self.total)

    def do_finished(self, claim: Claim, run: DoRun) -> None:
        self.do_runs.append(run)

    def publish(self, summary: DriveSummary, graph: WorkGraph) -> None:
        self._publish(summary, graph, self.durations(self.item) if self.durations else None)

    def _publish(self, summary: DriveSummary, graph: WorkGraph, durations: Mapping[str, float] | None) -> None:
        done = sum(1 for m in summary.milestones if m.status is MilestoneStatus.DONE)
        progress_id = self.progress.stop()
        verdict = "all done" if summary.ok else "not all done"
        md = "\n".join(
            [
                f"# Work item {summary.item}: {summary.objective}",
                "",
                f"**{verdict}** — {summary.message}",
                "",
                counts_line(done, len(summary.milestones), summary.gate_runs, summary.cached),
                "",
                _picture(summary, graph, durations),
            ]
        )
        rows: list[dict[str, Any]] = [
            {
                "id": m.id,
                "milestone": m.name,
                "status": m.view,
                "attempts": f"{m.attempts}/{m.max_attempts}",
                "duration_s": round(m.duration, 2),
                "last_reason": f"cached from {cached_text(m.cached_from)}" if m.cached_from else m.last_reason or "",
            }
            for m in summary.milestones
        ]
        with get_client(sync_client=True) as client:
            if progress_id is not None:
                client.update_artifact(progress_id, ArtifactUpdate(data=100.0 * done / self.total))
            self._create(client, "markdown", f"milepost-item-{self.item}-summary", verdict, md)
            self._create(client, "table", f"milepost-item-{self.item}-milestones", "milestones", json.dumps(rows))
            if self.do_runs:
                doers = json.dumps(do_rows(self.do_runs))
                self._create(client, "table", f"milepost-item-{self.item}-do-runs", "the doers' attempts", doers)

    def _create(self, client: SyncPrefectClient, kind: str, key: str, description: str, data: Any) -> UUID:
        made = ArtifactCreate(type=kind, key=key, description=description, flow_run_id=self.flow_run_id, data=data)
        return client.create_artifact(made).id

    def publish_later(self, summary: DriveSummary, graph: WorkGraph, warn: Callable[[str], None]) -> threading.Thread:
        """:meth:`publish` in a thread, so that drawing the picture (its
        layout's imports are most of it) and the API calls overlap the flow
        run's end; join the thread before the process exits. The store is
        read here, in the caller's thread."""
        durations = self.durations(self.item) if self.durations else None

        def run() -> None:
            try:
                self._publish(summary, graph, durations)
            except Exception as e:  # the artifacts must never mask the drive's own outcome
                warn(f"could not publish the drive's artifacts: {type(e).__name__}: {e}")

        thread = threading.Thread(target=run, name="milepost-artifacts", daemon=True)
        thread.start()
        return thread

    def close(self) -> None:
        """Stop the progress thread without waiting (after :meth:`publish`, or instead of it)."""
        self.progress.stop(timeout=0)


class _Progress:
    """The progress artifact, kept by a thread with a client of its own:
    created when the drive starts, then set to the latest value at most once
    a second. A call per milestone would cost as much as the task run itself,
    and made in the loop it would hold every gate up for an API round trip.
    Best effort: an API that fails or hangs costs the picture of progress,
    never the drive."""

    def __init__(self, item: int, flow_run_id: UUID) -> None:
        self.item = item
        self.flow_run_id = flow_run_id
        self.id: UUID | None = None
        self._value: float | None = None
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="milepost-progress", daemon=True)
        self._thread.start()

    def set(self, value: float) -> None:
        with self._lock:
            self._value = value
        self._wake.set()

    def _take(self) -> float | None:
        with self._lock:
            value, self._value = self._value, None
        return value

    def _run(self) -> None:
        with contextlib.suppress(Exception), get_client(sync_client=True) as client:
            made = ArtifactCreate(
                type="progress",
                key=f"milepost-item-{self.item}-progress",
                description=f"work item {self.item}: milestones done",
                flow_run_id=self.flow_run_id,
                data=0.0,
            )
            self.id = client.create_artifact(made).id
            while not self._stop.is_set():
                self._wake.wait()
                self._wake.clear()
                value = self._take()
                if value is not None and not self._stop.is_set():
                    with contextlib.suppress(Exception):
                        client.update_artifact(self.id, ArtifactUpdate(data=value))
                self._stop.wait(PROGRESS_INTERVAL)

    def stop(self, timeout: float = 10.0) -> UUID | None:
        """End the thread (waiting at most ``timeout`` for a call under way);
        the artifact's id, if it was made."""
        self._stop.set()
        self._wake.set()
        self._thread.join(timeout)
        return self.id

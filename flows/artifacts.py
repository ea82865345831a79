"""Prefect artifacts of a drive: a progress artifact updated as milestones
finish, and at the end a markdown summary with the DAG as a picture (an SVG
image given as a ``data:`` URI: the Prefect UI renders images in markdown,
not Mermaid, and strips inline ``<svg>``) and a table of milestones (status,
attempts, last reason)."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any
from uuid import UUID

from prefect.artifacts import (
    create_markdown_artifact,
    create_progress_artifact,
    create_table_artifact,
    update_progress_artifact,
)

from milepost.events import DriveSummary, NullReporter
from milepost.graph.dag import WorkGraph
from milepost.graph.status import MilestoneStatus
from milepost.present.picture import svg_data_uri, to_svg
from milepost.results import Claim, DoneResult

__all__ = ["ArtifactReporter"]

PROGRESS_INTERVAL = 1.0
# Past this the picture stays out of the artifact (`milepost graph --format svg` draws it).
MAX_PICTURE_BYTES = 4 * 1024 * 1024


def _picture(summary: DriveSummary, graph: WorkGraph, durations: Mapping[str, float] | None) -> str:
    svg = to_svg(graph, f"work item {summary.item}: {summary.objective}", durations=durations)
    if len(svg) > MAX_PICTURE_BYTES:
        return f"(the DAG is too large to embed here: `milepost graph {summary.item} --format html -o dag.html`)"
    return f"![the milestone DAG of work item {summary.item}]({svg_data_uri(svg)})"


class ArtifactReporter(NullReporter):
    def __init__(self, item: int, total: int, durations: Callable[[int], Mapping[str, float]] | None = None) -> None:
        self.item = item
        self.durations = durations  # the gates' last run times, for the picture's critical path
        self.total = max(total, 1)
        self.finished: set[str] = set()
        self._last_update = 0.0
        created = create_progress_artifact(
            progress=0.0, key=f"milepost-item-{item}-progress", description=f"work item {item}: milestones done"
        )
        # Called from a sync flow, Prefect's async_dispatch returns the id, not a coroutine.
        self.progress_id: UUID | None = created if isinstance(created, UUID) else None

    def gate_finished(self, claim: Claim, done: DoneResult) -> None:
        if done.milestone.status.is_done:
            self.finished.add(done.milestone.name)
        # One API call per milestone would cost as much as the task run itself:
        # update at most once a second (publish() sets the final value).
        now = time.monotonic()
        if self.progress_id is not None and now - self._last_update >= PROGRESS_INTERVAL:
            self._last_update = now
            update_progress_artifact(self.progress_id, progress=100.0 * len(self.finished) / self.total)

    def publish(self, summary: DriveSummary, graph: WorkGraph) -> None:
        done = sum(1 for m in summary.milestones if m.status is MilestoneStatus.DONE)
        if self.progress_id is not None:
            update_progress_artifact(self.progress_id, progress=100.0 * done / self.total)
        verdict = "all done" if summary.ok else "not all done"
        md = "\n".join(
            [
                f"# Work item {summary.item}: {summary.objective}",
                "",
                f"**{verdict}** — {summary.message}",
                "",
                f"{done} of {len(summary.milestones)} milestones done, {summary.gate_runs} gate runs in this drive.",
                "",
                _picture(summary, graph, self.durations(self.item) if self.durations else None),
            ]
        )
        create_markdown_artifact(markdown=md, key=f"milepost-item-{self.item}-summary", description=verdict)
        rows: list[dict[str, Any]] = [
            {
                "id": m.id,
                "milestone": m.name,
                "status": m.view,
                "attempts": f"{m.attempts}/{m.max_attempts}",
                "duration_s": round(m.duration, 2),
                "last_reason": m.last_reason or "",
            }
            for m in summary.milestones
        ]
        create_table_artifact(table=rows, key=f"milepost-item-{self.item}-milestones", description="milestones")

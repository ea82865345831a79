"""Analyses of a DAG that the views share: the critical path (by the gates'
last run times when any is known, else by count) and the graph as data
(``graph --format json``, the MCP ``graph`` tool). Pure: no I/O, no styles."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NamedTuple

from milepost.graph.dag import WorkGraph, display_status
from milepost.graph.models import Milestone
from milepost.graph.words import count

__all__ = ["CriticalPath", "critical_path", "graph_json"]


class CriticalPath(NamedTuple):
    """The critical path and what it was measured in: ``seconds`` of gate
    time (each gate's last run) when any is known, else None (by count)."""

    milestones: list[Milestone]
    seconds: float | None

    @property
    def by(self) -> str:
        return "count" if self.seconds is None else "time"

    def describe(self) -> str:
        n = len(self.milestones)
        if self.seconds is None:
            return f"{count(n, 'milestone')} by count; no gate has run yet"
        return f"{count(n, 'milestone')}, {self.seconds:.1f} s by the gates' last runs"


def critical_path(g: WorkGraph, durations: Mapping[str, float] | None = None) -> CriticalPath:
    """The critical path by the gates' last durations when any is known
    (see :meth:`WorkGraph.path_weights`), else by milestone count."""
    path = g.critical_path(durations)
    weights = g.path_weights(durations)
    return CriticalPath(path, None if weights is None else sum(weights[m.name] for m in path))


def graph_json(g: WorkGraph, durations: Mapping[str, float] | None = None) -> dict[str, Any]:
    """Nodes, edges and the analyses, for ``graph --format json``."""
    crit = critical_path(g, durations)
    return {
        "nodes": [
            {"id": m.id, "name": m.name, "status": m.status.value, "view": display_status(g, m), "deps": m.deps}
            for m in g
        ],
        "edges": [[d, m.name] for m in g for d in m.deps],
        "layers": [[m.name for m in layer] for layer in g.layers()],
        "critical_path": [m.name for m in crit.milestones],
        "critical_path_by": crit.by,
        "critical_path_seconds": crit.seconds,
        "bottlenecks": [{"name": m.name, "dependents": c} for m, c in g.bottlenecks()],
        "ready": [m.name for m in g.ready()],
        "next": (n.name if (n := g.next_ready()) else None),
    }

"""The DAG as text: Mermaid, Graphviz dot, and a plain-text layer listing.
Pure string building; the CLI decides where it goes."""

from __future__ import annotations

from typing import Any

from milepost.graph.dag import WorkGraph
from milepost.graph.models import Milestone
from milepost.graph.status import MilestoneStatus

__all__ = ["STATUS_COLOURS", "display_status", "graph_json", "to_dot", "to_mermaid", "to_text"]

S = MilestoneStatus

# Fill colours for diagrams; the terminal uses rich colour names in the CLI.
STATUS_COLOURS: dict[str, str] = {
    "done": "#2e7d32",
    "ready": "#1565c0",
    "in_progress": "#f9a825",
    "in_review": "#00838f",
    "needs_fix": "#ef6c00",
    "stuck": "#c62828",
    "blocked": "#9e9e9e",
    "pending": "#9e9e9e",
    "locked": "#6d4c41",
    "hypothesis": "#7e57c2",
}


def display_status(g: WorkGraph, m: Milestone) -> str:
    """The stored status, with the derived views folded in: a ready
    milestone shows ``ready``, a pending one waiting on deps ``blocked``."""
    if m.awaiting_review:
        return "in_review"
    if g.is_ready(m.name):
        return "ready" if m.status is S.PENDING else "needs_fix"
    if m.status is S.PENDING:
        return "blocked"
    if m.is_stuck:
        return "stuck"
    return m.status.value


def _mermaid_id(m: Milestone) -> str:
    return f"m{m.id}"


def to_mermaid(g: WorkGraph) -> str:
    lines = ["flowchart TD"]
    used: set[str] = set()
    for m in g:
        st = display_status(g, m)
        used.add(st)
        label = f"{m.name}<br/>{st}" + (f" {m.attempts}/{m.max_attempts}" if m.attempts else "")
        lines.append(f'    {_mermaid_id(m)}["{label}"]:::{st}')
    for m in g:
        for d in m.deps:
            lines.append(f"    {_mermaid_id(g.get(d))} --> {_mermaid_id(m)}")
    for st in sorted(used):
        colour = STATUS_COLOURS.get(st, "#9e9e9e")
        lines.append(f"    classDef {st} fill:{colour},color:#fff,stroke:#333")
    return "\n".join(lines) + "\n"


def _dot_quote(s: str) -> str:
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'


def to_dot(g: WorkGraph, title: str = "milestones") -> str:
    lines = [
        f"digraph {_dot_quote(title)} {{",
        "    rankdir=TB;",
        '    node [shape=box, style="rounded,filled", fontcolor=white];',
    ]
    for m in g:
        st = display_status(g, m)
        colour = STATUS_COLOURS.get(st, "#9e9e9e")
        lines.append(
            f"    {_dot_quote(m.name)} [label={_dot_quote(m.name + chr(10) + st)}, fillcolor={_dot_quote(colour)}];"
        )
    for m in g:
        for d in m.deps:
            lines.append(f"    {_dot_quote(d)} -> {_dot_quote(m.name)};")
    lines.append("}")
    return "\n".join(lines) + "\n"


def to_text(g: WorkGraph) -> str:
    """Layers top to bottom; each milestone with its status and deps."""
    if not len(g):
        return "(no milestones)\n"
    out = []
    for i, layer in enumerate(g.layers(), start=1):
        out.append(f"layer {i}")
        for m in layer:
            deps = f"  <- {', '.join(m.deps)}" if m.deps else ""
            out.append(f"  [{display_status(g, m)}] {m.name}{deps}")
    return "\n".join(out) + "\n"


def graph_json(g: WorkGraph) -> dict[str, Any]:
    """Nodes, edges and the analyses, for ``graph --format json``."""
    return {
        "nodes": [
            {"id": m.id, "name": m.name, "status": m.status.value, "view": display_status(g, m), "deps": m.deps}
            for m in g
        ],
        "edges": [[d, m.name] for m in g for d in m.deps],
        "layers": [[m.name for m in layer] for layer in g.layers()],
        "critical_path": [m.name for m in g.critical_path()],
        "bottlenecks": [{"name": m.name, "dependents": c} for m, c in g.bottlenecks()],
        "ready": [m.name for m in g.ready()],
        "next": (n.name if (n := g.next_ready()) else None),
    }

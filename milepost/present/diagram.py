"""The DAG as text: Mermaid, Graphviz dot, and a plain-text layer listing,
and the one colour map every picture and terminal view uses. Pure string
building; the caller decides where it goes."""

from __future__ import annotations

from typing import NamedTuple

from milepost.graph.dag import WorkGraph, display_status
from milepost.graph.models import Milestone
from milepost.graph.status import DisplayStatus, MilestoneStatus, Readiness

__all__ = ["PALETTE", "Colour", "fill", "to_dot", "to_mermaid", "to_text"]

S = MilestoneStatus
D = DisplayStatus


class Colour(NamedTuple):
    fill: str  # diagrams: SVG, Mermaid, dot
    term: str  # the terminal: a rich style


GREY = Colour("#9e9e9e", "dim")

# The one colour map: milestone views, item readiness and states, gate
# outcomes (by their values) and the picture's "running".
PALETTE: dict[str, Colour] = {
    D.DONE: Colour("#2e7d32", "green"),
    D.STALE: Colour("#9e9d24", "bold dark_khaki"),
    D.READY: Colour("#1565c0", "bold cyan"),
    D.IN_PROGRESS: Colour("#f9a825", "yellow"),
    D.IN_REVIEW: Colour("#00838f", "bold yellow"),
    D.NEEDS_FIX: Colour("#ef6c00", "dark_orange"),
    D.STUCK: Colour("#c62828", "bold red"),
    D.BLOCKED: GREY,
    D.PENDING: GREY,
    D.LOCKED: Colour("#6d4c41", "magenta"),
    D.HYPOTHESIS: Colour("#7e57c2", "purple"),
    "running": Colour("#1e88e5", "bold blue"),
    Readiness.RUNNABLE: Colour("#1565c0", "bold cyan"),
    Readiness.WAITING_FOR_OPERATOR: Colour("#f9a825", "yellow"),
    Readiness.BLOCKED: GREY,
    Readiness.COMPLETED: Colour("#2e7d32", "green"),
    Readiness.CANCELLED: GREY,
    "passed": Colour("#2e7d32", "green"),
    "cached": Colour("#558b2f", "green"),
    "failed": Colour("#c62828", "red"),
    "interrupted": Colour("#f9a825", "yellow"),
    "skipped": GREY,
}


def fill(status: str) -> str:
    return PALETTE.get(status, GREY).fill


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
    for view in sorted(used):
        lines.append(f"    classDef {view} fill:{fill(view)},color:#fff,stroke:#333")
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
        colour = fill(st)
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

"""The DAG as a picture: a layered left-to-right drawing with status colours
and the critical path marked, as SVG (and PNG where a converter is
installed), and a self-contained HTML page with the picture and a table of
milestones.

The layout is in .fit (grandalf's Sugiyama layout, fitted to a screen); the
drawing is plain SVG built here. No network, no JavaScript."""

from __future__ import annotations

import base64
import html
import itertools
import re
import shutil
import subprocess
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from milepost.errors import EnvironmentProblem
from milepost.graph.analysis import critical_path
from milepost.graph.dag import WorkGraph, display_status
from milepost.present.diagram import fill as colour_of
from milepost.present.fit import NODE_H, Node, Placed, move, place
from milepost.results import MilestoneView

__all__ = ["LEGEND", "Drawing", "layout", "svg_data_uri", "to_html", "to_png", "to_svg"]

# The statuses a drawing can show, in legend order.
LEGEND = [
    "done",
    "stale",
    "ready",
    "running",
    "in_progress",
    "in_review",
    "needs_fix",
    "stuck",
    "blocked",
    "locked",
    "hypothesis",
]
FONT = "DejaVu Sans, Verdana, Arial, sans-serif"
CHAR_W = 7.2  # px per character at 12 px
LINE_H = 14  # a second line of a long name
WRAP = 12  # a name longer than this is cut in two lines, after its last dot (or a dash near its middle)
MARGIN = 20
TITLE_H = 34
LEGEND_H = 30
Point = tuple[float, float]
Key = tuple[str, str]  # an edge: tail, head


@dataclass
class Drawing:
    nodes: dict[str, Node]
    edges: list[tuple[str, str, list[Point], bool]]  # tail, head, points, critical
    width: float
    height: float
    title: str = ""
    legend: list[str] = field(default_factory=list)
    critical: str = ""  # what the critical path was measured in, for the legend
    crossing: set[Key] = field(default_factory=set)  # edges between two pieces of a fitted drawing


def layout(
    g: WorkGraph, title: str = "", running: set[str] | None = None, durations: Mapping[str, float] | None = None
) -> Drawing:
    """Place every milestone: layers left to right, deps before dependents,
    fitted to a screen (see .fit); the critical path by the gates' last
    ``durations`` when any is known."""
    path = critical_path(g, durations)
    crit = [m.name for m in path.milestones]
    nodes = _nodes(g, running or set(), set(crit))
    placed = place(g, nodes)
    note = f"critical path: {path.describe()}" if len(crit) > 1 else ""
    return _framed(placed, title, set(itertools.pairwise(crit)), note)


def _nodes(g: WorkGraph, running: set[str], critical: set[str]) -> dict[str, Node]:
    """Each milestone's box: its name over its status (and tries), as wide as
    the longer."""
    nodes = {}
    for m in g:
        status = "running" if m.name in running else display_status(g, m)
        label = f"{status} · {m.attempts}/{m.max_attempts}" if m.attempts else status
        lines = _lines(m.name)
        w = max(len(s) for s in [*lines, label]) * CHAR_W + 24
        h = NODE_H + LINE_H * (len(lines) - 1)
        nodes[m.name] = Node(m.name, status, label, lines, w=w, h=h, critical=m.name in critical)
    return nodes


def _lines(name: str) -> list[str]:
    """A long name in two lines: after a dot (a module's package, then the
    module; of several dots, the one giving the shorter longer line, the
    last on a tie), else after the dash, underscore, slash or space nearest
    its middle; a name without one stays one line."""
    if len(name) <= WRAP:
        return [name]
    dots = [i for i, c in enumerate(name[1:-1], start=1) if c == "."]
    seps = dots or [i for i, c in enumerate(name[1:-1], start=1) if c in "-_/ "]
    at = min(reversed(seps), key=lambda i: max(i + 1, len(name) - i - 1), default=-1)
    return [name[: at + 1], name[at + 1 :]] if at > 0 else [name]


def _framed(placed: Placed, title: str, crit_edges: set[Key], note: str) -> Drawing:
    """The drawing inside its margins, title and legend; each edge from its
    tail's side to its head's."""
    nodes = placed.nodes
    dx, dy = MARGIN, MARGIN + (TITLE_H if title else 0)
    move(nodes.values(), [*placed.paths.values(), *placed.routes.values()], dx, dy)
    edges = []
    for key, pts in placed.paths.items():
        route = placed.routes.get(key) or _ends(nodes[key[0]], nodes[key[1]], pts)
        edges.append((*key, route, key in crit_edges))
    used = {n.status for n in nodes.values()}
    legend = [s for s in LEGEND if s in used]
    title_w = 2 * MARGIN + len(title) * CHAR_W * 1.25  # the title is drawn at 15 px, bold
    legend_w = 2 * MARGIN + sum(len(s) * CHAR_W + 34 for s in legend) + 28 + len(note) * CHAR_W
    width = max(placed.width + dx + MARGIN, 360.0, title_w, legend_w)
    height = max(placed.height + dy, 60.0) + MARGIN + LEGEND_H
    return Drawing(nodes, edges, width, height, title, legend, note, set(placed.routes))


def _ends(a: Node, b: Node, pts: list[Point]) -> list[Point]:
    """An edge out of its tail's right side into its head's left, through its bends."""
    return [(a.x + a.w / 2, a.y), *pts[1:-1], (b.x - b.w / 2, b.y)]


def _path(points: list[Point]) -> str:
    """A smooth left-to-right curve through the points."""
    (x0, y0), *rest = points
    d = [f"M{x0:.1f},{y0:.1f}"]
    px, py = x0, y0
    for x, y in rest:
        dx = max(12.0, (x - px) / 2)
        d.append(f"C{px + dx:.1f},{py:.1f} {x - dx:.1f},{y:.1f} {x:.1f},{y:.1f}")
        px, py = x, y
    return " ".join(d)


def to_svg(
    g: WorkGraph, title: str = "", running: set[str] | None = None, durations: Mapping[str, float] | None = None
) -> str:
    """The DAG as a standalone SVG document that scales to its window: as
    wide as the window up to its own size, never cut off (a viewBox, no
    fixed width or height)."""
    dr = layout(g, title, running, durations)
    esc = html.escape
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {dr.width:.0f} {dr.height:.0f}" width="100%"'
        f' style="max-width:{dr.width:.0f}px;height:auto" font-family="{FONT}" font-size="12">',
        "<defs>",
        '<marker id="arrow" viewBox="0 0 10 10" refX="10" refY="5" markerWidth="8" markerHeight="8"'
        ' markerUnits="userSpaceOnUse" orient="auto"><path d="M0,0 L10,5 L0,10 z" fill="#90a4ae"/></marker>',
        '<marker id="arrow-crit" viewBox="0 0 10 10" refX="10" refY="5" markerWidth="10" markerHeight="10"'
        ' markerUnits="userSpaceOnUse" orient="auto"><path d="M0,0 L10,5 L0,10 z" fill="#212121"/></marker>',
        "</defs>",
        f'<rect width="{dr.width:.0f}" height="{dr.height:.0f}" fill="#ffffff"/>',
    ]
    if dr.title:
        out.append(f'<text x="{MARGIN}" y="{MARGIN + 12}" font-size="15" font-weight="bold">{esc(dr.title)}</text>')
    for tail, head, pts, crit in dr.edges:
        stroke, width, marker = ("#212121", 2.4, "arrow-crit") if crit else ("#90a4ae", 1.3, "arrow")
        if (tail, head) in dr.crossing:  # from one piece to another: a straight dashed line
            d, dash = "M" + " L".join(f"{x:.1f},{y:.1f}" for x, y in pts), ' stroke-dasharray="6 4"'
        else:
            d, dash = _path(pts), ""
        out.append(
            f'<path d="{d}" fill="none" stroke="{stroke}" stroke-width="{width}"{dash} marker-end="url(#{marker})"/>'
        )
    for n in dr.nodes.values():
        fill = colour_of(n.status)
        border = ' stroke="#212121" stroke-width="2.5"' if n.critical else ' stroke="#ffffff" stroke-width="1"'
        x, y = n.x - n.w / 2, n.y - n.h / 2
        out.append(f'<g class="milestone {esc(n.status)}"><title>{esc(n.name)}: {esc(n.label)}</title>')
        out.append(f'<rect x="{x:.1f}" y="{y:.1f}" width="{n.w:.1f}" height="{n.h}" rx="7" fill="{fill}"{border}/>')
        top = n.y - n.h / 2 + 17  # the first line's baseline
        for i, line in enumerate(n.lines or [n.name]):
            out.append(
                f'<text x="{n.x:.1f}" y="{top + i * LINE_H:.1f}" text-anchor="middle" fill="#ffffff"'
                f' font-weight="bold">{esc(line)}</text>'
            )
        out.append(
            f'<text x="{n.x:.1f}" y="{n.y + n.h / 2 - 8:.1f}" text-anchor="middle" fill="#ffffff" font-size="10.5">'
            f"{esc(n.label)}</text></g>"
        )
    lx, ly = MARGIN, dr.height - LEGEND_H + 8
    for status in dr.legend:
        out.append(f'<rect x="{lx}" y="{ly}" width="12" height="12" rx="3" fill="{colour_of(status)}"/>')
        out.append(f'<text x="{lx + 16}" y="{ly + 10}" fill="#37474f">{status}</text>')
        lx += int(len(status) * CHAR_W) + 34
    if dr.critical:
        out.append(f'<line x1="{lx}" y1="{ly + 6}" x2="{lx + 22}" y2="{ly + 6}" stroke="#212121" stroke-width="2.4"/>')
        out.append(f'<text x="{lx + 28}" y="{ly + 10}" fill="#37474f">{esc(dr.critical)}</text>')
    out.append("</svg>")
    return "\n".join(out) + "\n"


def svg_data_uri(svg: str) -> str:
    return "data:image/svg+xml;base64," + base64.b64encode(svg.encode()).decode()


def to_html(
    g: WorkGraph,
    views: list[MilestoneView],
    title: str,
    subtitle: str = "",
    durations: Mapping[str, float] | None = None,
) -> str:
    """One self-contained page: the picture (as wide as the page, up to its
    own size) and a table of milestones."""
    esc = html.escape
    rows = []
    for v in views:
        colour = colour_of(v.view)
        note = v.reason or v.last_run or ""
        if v.waiting_on:
            note = "waiting on " + ", ".join(v.waiting_on)
        rows.append(
            f"<tr><td>{v.id}</td><td><b>{esc(v.name)}</b></td>"
            f'<td><span class="st" style="background:{colour}">{esc(v.view)}</span></td>'
            f"<td>{v.attempts}/{v.max_attempts}</td><td>{esc(', '.join(v.deps))}</td>"
            f"<td>{esc(v.acceptance)}</td><td>{esc(note)}</td></tr>"
        )
    svg = to_svg(g, durations=durations)  # the page's heading carries the title
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>{esc(title)}</title>
<style>
body {{ font-family: {FONT}; margin: 24px; color: #263238; }}
h1 {{ font-size: 20px; margin: 0 0 4px; }} p.sub {{ color: #546e7a; margin: 0 0 16px; }}
.picture {{ border: 1px solid #eceff1; border-radius: 8px; padding: 8px; }}
.picture svg {{ display: block; }}
table {{ border-collapse: collapse; margin-top: 20px; font-size: 13px; }}
th, td {{ border-bottom: 1px solid #eceff1; padding: 6px 10px; text-align: left; vertical-align: top; }}
th {{ background: #f5f7f8; }}
.st {{ color: #fff; border-radius: 4px; padding: 1px 7px; font-size: 12px; }}
</style></head>
<body>
<h1>{esc(title)}</h1>
<p class="sub">{esc(subtitle)}</p>
<div class="picture">
{svg}</div>
<table>
<thead><tr><th>id</th><th>milestone</th><th>status</th><th>budget</th><th>deps</th><th>acceptance</th>
<th>last reason</th></tr></thead>
<tbody>
{chr(10).join(rows)}
</tbody></table>
</body></html>
"""


def to_png(svg: str) -> bytes:
    """Render SVG to PNG with the first converter that works: rsvg-convert
    (librsvg), a headless Chromium, or ImageMagick; at the picture's own size."""
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "graph.svg"
        dst = Path(tmp) / "graph.png"
        width, height = _size(svg)
        src.write_text(_sized(svg, width, height))
        candidates: list[list[str]] = []
        if tool := shutil.which("rsvg-convert"):
            candidates.append([tool, "-f", "png", "-o", str(dst), str(src)])
        if browser := (shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")):
            candidates.append(
                [
                    browser,
                    "--headless",
                    "--no-sandbox",
                    "--disable-gpu",
                    "--no-first-run",
                    "--hide-scrollbars",
                    "--disable-background-networking",
                    "--disable-component-update",
                    "--disable-sync",
                    f"--user-data-dir={Path(tmp) / 'profile'}",
                    f"--window-size={width},{height}",
                    f"--screenshot={dst}",
                    src.as_uri(),
                ]
            )
        if tool := (shutil.which("magick") or shutil.which("convert")):
            candidates.append([tool, str(src), str(dst)])
        failures = []
        for cmd in candidates:
            dst.unlink(missing_ok=True)
            try:
                subprocess.run(cmd, check=True, capture_output=True, timeout=60)
            except (subprocess.SubprocessError, OSError) as e:
                failures.append(f"{Path(cmd[0]).name}: {e}")
                continue
            if dst.exists() and dst.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n":
                return dst.read_bytes()
            failures.append(f"{Path(cmd[0]).name}: no PNG written")
        if not candidates:
            raise EnvironmentProblem(
                "graph --format png needs an SVG converter: install librsvg2-bin (rsvg-convert), Chromium or"
                " ImageMagick, or use --format svg"
            )
        raise EnvironmentProblem("converting the graph to PNG failed: " + "; ".join(failures))


def _size(svg: str) -> tuple[int, int]:
    m = re.search(r'viewBox="0 0 (\d+) (\d+)"', svg)
    return (int(m.group(1)), int(m.group(2))) if m else (1200, 800)


def _sized(svg: str, width: int, height: int) -> str:
    """The picture at a fixed size, for converters that do not scale."""
    return re.sub(r' width="100%" style="[^"]*"', f' width="{width}" height="{height}"', svg, count=1)

"""A layered drawing fitted to a 16:10 screen.

:func:`place` lays the milestones out with grandalf's Sugiyama layout
(layers, crossing reduction, long edges routed through bends), computed top
to bottom and turned on its side: layers left to right, a long edge passing
a layer in a narrow lane, the long edges into one milestone joined in one
line, a layer taller than half a screen staggered over several columns;
milestones without an edge packed in rows above.

A left-to-right layout of a long chain is still a strip many screens wide,
and one of many milestones side by side a column many screens tall; shrunk
to the window, either has labels too small to read. :func:`fit_screen` cuts
such a drawing between its nodes into pieces and lays the pieces out the
other way (a wide one into bands one under the other, a tall one into
columns side by side), choosing the number of pieces whose result is
nearest 16:10 while staying about one window wide at its own size (labels at
their size) and at most two windows tall, each edge from one piece to
another counting against a cut. Edges between pieces are drawn as plain
lines through the gap between them."""

from __future__ import annotations

import bisect
import itertools
import math
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from milepost.graph.dag import WorkGraph

__all__ = ["ASPECT", "NODE_H", "SCREEN_H", "SCREEN_W", "Node", "Placed", "cost", "fit_screen", "fits", "move", "place"]

ASPECT = 16 / 10
SCREEN_W = 1400.0  # what a 1440-px window shows of a page at the picture's own size
SCREEN_H = 900.0
GAP = 40.0  # between pieces
NODE_H = 40
LAYER_GAP = 56  # between layers, left to right
ROW_GAP = 16  # between nodes of a layer
BUS = 3  # long edges into one milestone drawn as one line
LANE = 12  # an edge passing a layer takes this much room beside its nodes
CROSSING = 0.03  # the cost of one edge drawn from one piece to another
Point = tuple[float, float]
Key = tuple[str, str]  # an edge: tail, head


class Box(Protocol):
    x: float  # centre
    y: float
    w: float
    h: float


def cost(width: float, height: float) -> float:
    """How far a ``width`` x ``height`` picture is from a readable 16:10 one:
    its aspect's distance from 16:10, plus four times how far it is shrunk
    to fit a window's width (its labels with it) and twice how far it is
    then past two windows' height."""
    scale = min(1.0, SCREEN_W / width)
    return (
        abs(math.log(width / height / ASPECT))
        + 4 * max(0.0, math.log(width / SCREEN_W))
        + 2 * max(0.0, math.log(height * scale / (2 * SCREEN_H)))
    )


def _cuts(spans: Sequence[tuple[float, float]], total: float, k: int) -> list[float] | None:
    """``k - 1`` cut positions in the free gaps between ``spans``, each
    nearest its share of ``total``; None when there are not enough gaps."""
    free = []
    end = -math.inf
    for lo, hi in sorted(spans):
        if lo > end and end > -math.inf:
            free.append((end + lo) / 2)
        end = max(end, hi)
    cuts: list[float] = []
    for i in range(1, k):
        target = total * i / k
        left = [c for c in free if not cuts or c > cuts[-1]]
        if not left:
            return None
        cuts.append(min(left, key=lambda c: abs(c - target)))
    return cuts


def _pieces(boxes: Sequence[Box], cuts: list[float], across: bool) -> tuple[list[int], list[float], list[float]]:
    """Each box's piece; each piece's start along the cut axis; and where
    each piece begins along the other axis once the pieces are stacked
    (each as deep as its own boxes, a gap between)."""
    of = [bisect.bisect(cuts, b.x if across else b.y) for b in boxes]
    k = len(cuts) + 1
    lo, slo, shi = [math.inf] * k, [math.inf] * k, [-math.inf] * k
    for b, p in zip(boxes, of, strict=True):
        a, half = (b.x, b.w / 2) if across else (b.y, b.h / 2)
        o, ohalf = (b.y, b.h / 2) if across else (b.x, b.w / 2)
        lo[p] = min(lo[p], a - half)
        slo[p], shi[p] = min(slo[p], o - ohalf), max(shi[p], o + ohalf)
    starts, at = [], 0.0
    for p in range(k):
        starts.append(at)
        at += (shi[p] - slo[p] + GAP) if shi[p] > -math.inf else 0.0
    return of, lo, [start - (slo[p] if slo[p] < math.inf else 0.0) for p, start in enumerate(starts)]


def _size(boxes: Sequence[Box], of: list[int], lo: list[float], shift: list[float], across: bool) -> Point:
    """The width and height of the pieces laid out."""
    right = max(b.x - lo[p] + b.w / 2 if across else b.x + shift[p] + b.w / 2 for b, p in zip(boxes, of, strict=True))
    bottom = max(b.y + shift[p] + b.h / 2 if across else b.y - lo[p] + b.h / 2 for b, p in zip(boxes, of, strict=True))
    return right, bottom


def _choose(boxes: Sequence[Box], ends: Sequence[tuple[int, int]]) -> tuple[list[float], bool]:
    """The cuts (none: leave it as it is) and their direction (across: the
    width cut into bands, else the height into columns) whose result costs
    least, each edge between two pieces counted against it."""
    width = max(b.x + b.w / 2 for b in boxes)
    height = max(b.y + b.h / 2 for b in boxes)
    best: tuple[float, list[float], bool] = (cost(width, height), [], True)
    for k in range(2, 9):
        for across in (True, False):
            spans = [(b.x - b.w / 2, b.x + b.w / 2) if across else (b.y - b.h / 2, b.y + b.h / 2) for b in boxes]
            cuts = _cuts(spans, width if across else height, k)
            if cuts is None:
                continue
            of, lo, shift = _pieces(boxes, cuts, across)
            crossing = sum(of[t] != of[h] for t, h in ends)
            if (c := cost(*_size(boxes, of, lo, shift, across)) + CROSSING * crossing) < best[0] - 0.05:
                best = (c, cuts, across)
    return best[1], best[2]


def _between(a: Box, b: Box, lane: float, across: bool) -> list[Point]:
    """An edge from ``a`` to ``b`` in another piece: out of ``a``'s right
    side, along the ``lane`` in the gap before ``b``'s piece, into ``b``'s
    left side."""
    out, into = (a.x + a.w / 2, a.y), (b.x - b.w / 2, b.y)
    if across:  # down to the gap above the head's band, along it, into the head
        return [out, (out[0] + 8, out[1]), (out[0] + 8, lane), (into[0] - 14, lane), (into[0] - 14, into[1]), into]
    return [out, (lane, out[1]), (lane, into[1]), into]  # along to the gap left of the head's column, along it


def fits(width: float, height: float) -> bool:
    """Whether a picture needs no cutting: one window wide, two tall."""
    return width <= SCREEN_W and height <= 2 * SCREEN_H


def fit_screen(
    boxes: Sequence[Box], paths: list[list[Point]], ends: Sequence[tuple[int, int]]
) -> dict[int, list[Point]]:
    """Cut and rearrange ``boxes`` (laid out from 0,0, edges left to right)
    and the edge ``paths`` between them (``ends``: the indexes of each path's
    two boxes) in place; the routes of the paths that now join two pieces,
    by index: out of the tail's right side, along the gap before the head's
    piece, into the head's left side."""
    if len(boxes) < 2 or fits(max(b.x + b.w / 2 for b in boxes), max(b.y + b.h / 2 for b in boxes)):
        return {}  # it fits as it is
    cuts, across = _choose(boxes, ends)
    return _rearrange(boxes, paths, ends, cuts, across) if cuts else {}


def _rearrange(
    boxes: Sequence[Box], paths: list[list[Point]], ends: Sequence[tuple[int, int]], cuts: list[float], across: bool
) -> dict[int, list[Point]]:
    """Move the boxes and paths into their pieces; the routes between pieces."""
    of, lo, shift = _pieces(boxes, cuts, across)

    def moved(p: int, x: float, y: float) -> Point:
        return (x - lo[p], y + shift[p]) if across else (x + shift[p], y - lo[p])

    for b, p in zip(boxes, of, strict=True):
        b.x, b.y = moved(p, b.x, b.y)
    start = [math.inf] * (len(cuts) + 1)  # where each piece's boxes begin across the stacking
    for b, p in zip(boxes, of, strict=True):
        start[p] = min(start[p], b.y - b.h / 2 if across else b.x - b.w / 2)
    routes: dict[int, list[Point]] = {}
    for i, (t, h) in enumerate(ends):
        if of[t] == of[h]:
            paths[i][:] = [moved(of[t], x, y) for x, y in paths[i]]
        else:
            routes[i] = _between(boxes[t], boxes[h], start[of[h]] - GAP / 2, across)
    return routes


@dataclass
class Node:
    """A milestone's box, as drawn."""

    name: str
    status: str
    label: str
    lines: list[str] = field(default_factory=list)  # the name as drawn, one or two lines
    x: float = 0.0  # centre
    y: float = 0.0
    w: float = 0.0
    h: float = NODE_H
    critical: bool = False


@dataclass
class Placed:
    """Every milestone placed one way, from 0,0: those with an edge layered,
    those without packed in rows above them."""

    nodes: dict[str, Node]
    paths: dict[Key, list[Point]]  # centre to centre, through a long edge's bends
    routes: dict[Key, list[Point]]  # the edges between two pieces of a fitted drawing, side to side
    width: float = 0.0
    height: float = 0.0


class _View:
    """What grandalf reads (w, h) and writes (xy) for a vertex."""

    def __init__(self, w: float, h: float) -> None:
        self.w, self.h = w, h
        self.xy = (0.0, 0.0)


class _EdgeView:
    def __init__(self) -> None:
        self.pts: list[Point] = []

    def setpath(self, pts: list[Point]) -> None:
        self.pts = list(pts)


def place(g: WorkGraph, nodes: dict[str, Node]) -> Placed:
    """The drawing with layers left to right, cut to fit a screen when it
    does not, milestones without an edge above."""
    main, paths = _layered(g, nodes)
    keys = list(paths)
    boxes = list(main.values())
    at = {n.name: i for i, n in enumerate(boxes)}
    fitted = fit_screen(boxes, list(paths.values()), [(at[t], at[h]) for t, h in keys])
    placed = Placed({}, paths, {keys[i]: r for i, r in fitted.items()})
    singles = [replace(n) for n in nodes.values() if n.name not in main]
    grid_h = _pack(singles, max((n.x + n.w / 2 for n in boxes), default=0.0))
    move(boxes, [*paths.values(), *placed.routes.values()], 0.0, grid_h)
    placed.nodes = {n.name: n for n in sorted([*singles, *boxes], key=lambda n: g.get(n.name).id)}
    drawn = [placed.routes.get(key, pts) for key, pts in paths.items()]
    points = [p for pts in drawn for p in pts]  # a long edge may bend below every box
    placed.width = max([*(n.x + n.w / 2 for n in placed.nodes.values()), *(x for x, _ in points)], default=0.0)
    placed.height = max([*(n.y + n.h / 2 for n in placed.nodes.values()), *(y for _, y in points)], default=0.0)
    return placed


def _layered(g: WorkGraph, nodes: dict[str, Node]) -> tuple[dict[str, Node], dict[Key, list[Point]]]:
    """The milestones with an edge placed by grandalf's Sugiyama layout
    (copies of their nodes), one connected piece after another, from 0,0;
    each edge's points."""
    from grandalf.graphs import Edge, Vertex, graph_core

    verts = {}
    for n in nodes.values():
        verts[n.name] = v = Vertex(n.name)
        v.view = _View(n.h + ROW_GAP, n.w + LAYER_GAP)  # laid out top-down, then turned on its side
    chains = _chains(g, nodes)
    edges = {}
    for chain in chains.values():
        for key in itertools.pairwise(chain):
            for name in key:
                if name not in verts:  # a spacer: a bend of the edge, a lane wide
                    verts[name] = Vertex(name)
                    verts[name].view = _View(LANE, 1.0)
            edges[key] = e = Edge(verts[key[0]], verts[key[1]])
            e.view = _EdgeView()
    placed: dict[str, Node] = {}
    offset = 0.0
    for names, keys in _connected(list(edges)):  # grandalf's own Graph orders edges by hash: not the same twice
        comp = graph_core([verts[n] for n in names], [edges[k] for k in keys])
        offset = _component(comp, nodes, placed, offset)
    paths = {}
    for key, chain in chains.items():
        parts = [edges[k].view.pts for k in itertools.pairwise(chain)]
        paths[key] = [*parts[0], *(p for part in parts[1:] for p in part[1:])]
    boxes = list(placed.values())
    points = [p for pts in paths.values() for p in pts]
    left = min([*(n.x - n.w / 2 for n in boxes), *(x for x, _ in points)], default=0.0)
    top = min([*(n.y - n.h / 2 for n in boxes), *(y for _, y in points)], default=0.0)
    move(boxes, list(paths.values()), -left, -top)
    return placed, paths


def _chains(g: WorkGraph, nodes: dict[str, Node]) -> dict[Key, list[str]]:
    """Each edge as the chain of names grandalf lays out, tail to head. A
    milestone of a layer taller than half a screen is moved one or more
    layers on, in turn (staggered, as Graphviz's unflatten does), through
    bends its tail's edges share, so a fan of 30 is five columns of six, not
    one column of 30. The long edges into a milestone with ``BUS`` or more
    of them join one line into it, a shared bend in each layer they pass:
    one line, not one each, into a module the package's last milestones
    import, or a final milestone after many."""
    chains = {(d, m.name): [d, m.name] for m in g for d in m.deps}
    rank: dict[str, int] = {}
    for layer in g.layers():
        columns = max(1, math.ceil(sum(nodes[m.name].h + ROW_GAP for m in layer) / (SCREEN_H / 2)))
        for i, m in enumerate(layer):
            moved = i % columns if m.deps else 0
            rank[m.name] = max((rank[d] + 1 for d in m.deps), default=0) + moved
            for d in m.deps:
                chains[d, m.name] = [d, *(f"\0{d}\0>{j}" for j in range(moved)), m.name]
    long_in = Counter(h for t, h in chains if rank[h] - rank[t] > 1)
    for t, h in chains:
        if long_in[h] >= BUS and rank[h] - rank[t] > 1:
            chains[t, h] = [t, *(f"\0{h}\0{r}" for r in range(rank[t] + 1, rank[h])), h]
    return chains


def _connected(edges: list[Key]) -> list[tuple[list[str], list[Key]]]:
    """The connected pieces of the graph of ``edges``, each with its
    milestones and its edges, in the order they first appear."""
    piece: dict[str, int] = {}
    members: list[list[str]] = []
    for key in edges:
        for name in key:
            if name not in piece:
                piece[name] = len(members)
                members.append([name])
        a, b = piece[key[0]], piece[key[1]]
        if a != b:  # merge b into a
            for name in members[b]:
                piece[name] = a
            members[a] += members[b]
            members[b] = []
    return [(m, [k for k in edges if piece[k[0]] == i]) for i, m in enumerate(members) if m]


def _component(comp: Any, nodes: dict[str, Node], placed: dict[str, Node], offset: float) -> float:
    """Lay one connected piece out at ``offset`` across the layers; where the
    next one begins."""
    from grandalf.layouts import SugiyamaLayout

    sug = SugiyamaLayout(comp)
    sug.xspace, sug.yspace = 0, 0
    sug.dw = LANE  # a long edge's bend beside a layer's milestones: a lane, not a milestone's room
    sug.init_all()
    sug.draw(3)
    bends = [px for e in comp.sE for px, _ in e.view.pts]  # a long edge may bend outside its nodes
    lo: float = min([*(v.view.xy[0] - v.view.w / 2 for v in comp.sV), *bends])
    hi: float = max([*(v.view.xy[0] + v.view.w / 2 for v in comp.sV), *bends])

    def turned(across: float, along: float) -> Point:  # layers run left to right
        return (along, across - lo + offset)

    for v in comp.sV:
        if v.data in nodes:  # not a spacer
            x, y = turned(*v.view.xy)
            placed[v.data] = replace(nodes[v.data], x=x, y=y)
    for e in comp.sE:
        e.view.pts = [turned(*p) for p in e.view.pts]
    return offset + hi - lo + ROW_GAP


def move(boxes: Iterable[Node], paths: Iterable[list[Point]], dx: float, dy: float) -> None:
    """Shift boxes and paths in place by dx, dy."""
    for n in boxes:
        n.x, n.y = n.x + dx, n.y + dy
    for pts in paths:
        pts[:] = [(x + dx, y + dy) for x, y in pts]


def _pack(singles: list[Node], width: float) -> float:
    """Milestones with no edge at all go in rows, not one row each: rows as
    wide as the rest of the drawing, or as make the rows about 16:10 within
    a screen; how tall the rows are with a gap below (0 for none)."""
    if not singles:
        return 0.0
    area = sum((n.w + ROW_GAP) * (n.h + ROW_GAP) for n in singles)
    width = max(width, 900.0, min(SCREEN_W, math.sqrt(area * ASPECT)))
    x, y, row_h = 0.0, 0.0, 0.0
    for n in singles:
        if x > 0 and x + n.w > width:
            x, y, row_h = 0.0, y + row_h + ROW_GAP, 0.0
        n.x, n.y = x + n.w / 2, y + n.h / 2  # a row's boxes aligned at the top
        x, row_h = x + n.w + ROW_GAP, max(row_h, n.h)
    return y + row_h + 2 * ROW_GAP

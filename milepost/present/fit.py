"""A layered drawing fitted to a 16:10 screen.

A left-to-right layout of a long chain is a strip many screens wide, and one
of many independent milestones a column many screens tall; shrunk to the
window, either has labels too small to read. :func:`fit_screen` cuts such a
drawing between its nodes into pieces and lays the pieces out the other
way (a wide one into bands one under the other, a tall one into columns side
by side), choosing the number of pieces whose result is nearest 16:10 while
staying about one window wide at its own size (labels at their size) and
at most two windows tall. Edges between pieces are drawn as plain lines
through the gap between them."""

from __future__ import annotations

import bisect
import math
from collections.abc import Sequence
from typing import Protocol

__all__ = ["ASPECT", "SCREEN_H", "SCREEN_W", "fit_screen"]

ASPECT = 16 / 10
SCREEN_W = 1400.0  # what a 1440-px window shows of a page at the picture's own size
SCREEN_H = 900.0
GAP = 40.0  # between pieces
Point = tuple[float, float]


class Box(Protocol):
    x: float  # centre
    y: float
    w: float
    h: float


def _cost(width: float, height: float) -> float:
    """How far a ``width`` x ``height`` picture is from a readable 16:10 one."""
    scale = min(1.0, SCREEN_W / width)
    return (
        abs(math.log(width / height / ASPECT))
        + 2 * max(0.0, math.log(width / SCREEN_W))
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


def fit_screen(
    boxes: Sequence[Box], paths: list[list[Point]], ends: Sequence[tuple[int, int]]
) -> dict[int, list[Point]]:
    """Cut and rearrange ``boxes`` (laid out from 0,0, edges left to right)
    and the edge ``paths`` between them (``ends``: the indexes of each path's
    two boxes) in place; the routes of the paths that now join two pieces,
    by index: out of the tail's right side, along the gap before the head's
    piece, into the head's left side."""
    if len(boxes) < 2:
        return {}
    width = max(b.x + b.w / 2 for b in boxes)
    height = max(b.y + b.h / 2 for b in boxes)
    if width <= SCREEN_W and height <= 2 * SCREEN_H:
        return {}  # it fits as it is
    best: tuple[float, list[float], bool] = (_cost(width, height), [], True)
    for k in range(2, 9):
        for across in (True, False):  # across: cut the width into bands; else the height into columns
            spans = [(b.x - b.w / 2, b.x + b.w / 2) if across else (b.y - b.h / 2, b.y + b.h / 2) for b in boxes]
            cuts = _cuts(spans, width if across else height, k)
            if cuts is None:
                continue
            w, h = _size(boxes, *_pieces(boxes, cuts, across), across)
            if (cost := _cost(w, h)) < best[0] - 0.05:
                best = (cost, cuts, across)
    _, cuts, across = best
    if not cuts:
        return {}
    of, lo, shift = _pieces(boxes, cuts, across)

    def moved(p: int, x: float, y: float) -> Point:
        return (x - lo[p], y + shift[p]) if across else (x + shift[p], y - lo[p])

    for b, p in zip(boxes, of, strict=True):
        b.x, b.y = moved(p, b.x, b.y)
    routes: dict[int, list[Point]] = {}
    start = [math.inf] * (len(cuts) + 1)  # where each piece's boxes begin across the stacking
    for b, p in zip(boxes, of, strict=True):
        start[p] = min(start[p], b.y - b.h / 2 if across else b.x - b.w / 2)
    for i, (t, h) in enumerate(ends):
        if of[t] == of[h]:
            paths[i][:] = [moved(of[t], x, y) for x, y in paths[i]]
            continue
        a, b = boxes[t], boxes[h]
        out, into = (a.x + a.w / 2, a.y), (b.x - b.w / 2, b.y)
        lane = start[of[h]] - GAP / 2  # the gap before the head's piece
        if across:  # down to the gap above the head's band, along it, into the head
            routes[i] = [
                out,
                (out[0] + 8, out[1]),
                (out[0] + 8, lane),
                (into[0] - 14, lane),
                (into[0] - 14, into[1]),
                into,
            ]
        else:  # along to the gap left of the head's column, up or down it, into the head
            routes[i] = [out, (lane, out[1]), (lane, into[1]), into]
    return routes

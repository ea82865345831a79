"""Pictures that fit a 16:10 screen (issue 32): a drawing wider than a
window is cut between its layers into bands one under the other, labels at
their own size, a 30-milestone DAG within two screens; a small one is left
as it is."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET

from milepost.graph import Milestone, WorkGraph
from milepost.planfile import load_plan
from milepost.present.fit import SCREEN_H, SCREEN_W
from milepost.present.picture import layout, to_svg
from tests.conftest import EXAMPLES


def chain(n: int) -> WorkGraph:
    """``n`` milestones in a long chain with side branches and long names."""
    return WorkGraph(
        [
            Milestone(
                id=i + 1,
                name=f"step-{i:02d}-extract-interface",
                deps=[f"step-{i - 1 - i % 2:02d}-extract-interface"] if i > 1 else [],
            )
            for i in range(n)
        ]
    )


def test_a_30_milestone_chain_is_cut_into_bands_that_fit_a_window() -> None:
    g = chain(30)
    dr = layout(g)
    assert dr.width <= SCREEN_W + 40 and dr.height <= 2 * SCREEN_H  # own size: no label shrunk, two screens at most
    assert dr.crossing  # some edges join two bands
    ys = sorted({round(n.y) for n in dr.nodes.values()})
    assert ys[-1] - ys[0] > 300  # bands one under the other
    # every node inside the picture, none overlapping another
    boxes = list(dr.nodes.values())
    for n in boxes:
        assert n.x - n.w / 2 >= 0 and n.x + n.w / 2 <= dr.width and 0 <= n.y - n.h / 2 <= dr.height
    for a in boxes:
        for b in boxes:
            if a is not b:
                assert abs(a.x - b.x) >= (a.w + b.w) / 2 or abs(a.y - b.y) >= (a.h + b.h) / 2, (a.name, b.name)
    # an edge between bands runs along the gap and into its head's left side
    for tail, head, pts, _ in dr.edges:
        if (tail, head) in dr.crossing:
            h = dr.nodes[head]
            assert pts[-1] == (h.x - h.w / 2, h.y) and len(pts) == 6
    svg = to_svg(g)
    ET.fromstring(svg)
    assert svg.count('stroke-dasharray="6 4"') == len(dr.crossing)
    w, h = map(float, re.search(r'viewBox="0 0 (\d+) (\d+)"', svg).groups())  # type: ignore[union-attr]
    assert w <= SCREEN_W + 40 and h <= 2 * SCREEN_H


def test_a_picture_that_fits_is_left_as_it_is() -> None:
    g = WorkGraph(load_plan(EXAMPLES / "refactor" / "plan.yaml").to_milestones())
    dr = layout(g)
    assert not dr.crossing
    for m in g:
        for d in m.deps:
            assert dr.nodes[d].x < dr.nodes[m.name].x  # left to right, in one piece

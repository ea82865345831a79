"""Pictures that fit a 16:10 screen (issue 32): a drawing wider than a
window is cut between its layers into bands one under the other, labels at
their own size, a 30-milestone DAG within two screens; a small one is left
as it is.

The screen model (present/fit.py): a 1440x900 window shows SCREEN_W =
1400 px of a picture at its own size; a 30-milestone picture must be at
most that wide (plus its margins), at most 2 x 900 px tall, and for a
scaffold-like DAG, a chain and a loose set wider than tall."""

from __future__ import annotations

import itertools
import re
import xml.etree.ElementTree as ET
from collections.abc import Callable

import pytest

from milepost.graph import Milestone, WorkGraph
from milepost.planfile import load_plan
from milepost.present.fit import SCREEN_H, SCREEN_W
from milepost.present.picture import LEGEND_H, MARGIN, Drawing, layout, to_svg
from tests.conftest import EXAMPLES
from tests.test_picture import random_dag


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


# jinja2 3.1 scaffolded by module (`milepost plan scaffold jinja2`): 26 milestones, 9 layers, 63 edges;
# each line: a module (jinja2.<name>; "=" is jinja2 itself) and what it imports.
JINJA2 = """_identifier:
bccache:
constants:
exceptions:
utils: constants
async_utils: utils
debug: exceptions utils
lexer: _identifier exceptions utils
loaders: exceptions utils
nodes: utils
parser: exceptions lexer nodes
runtime: exceptions utils async_utils nodes
filters: exceptions utils async_utils runtime
tests: utils runtime
defaults: utils filters tests
visitor: nodes
idtracking: nodes visitor
optimizer: nodes visitor
compiler: exceptions utils nodes visitor idtracking optimizer
environment: exceptions utils lexer nodes parser runtime defaults compiler
=: bccache exceptions utils loaders runtime environment
ext: exceptions utils nodes runtime defaults environment
meta: nodes compiler environment
nativetypes: nodes compiler environment
sandbox: exceptions runtime environment
all-tests: debug = ext meta nativetypes sandbox"""


def scaffolded() -> WorkGraph:
    def module(s: str) -> str:
        return "jinja2" if s == "=" else s if s == "all-tests" else f"jinja2.{s}"

    ms = []
    for i, line in enumerate(JINJA2.splitlines()):
        name, deps = line.split(":")
        ms.append(Milestone(id=i + 1, name=module(name), deps=[module(d) for d in deps.split()]))
    return WorkGraph(ms)


def line(n: int) -> WorkGraph:
    """``n`` milestones one after another."""
    return WorkGraph(
        [
            Milestone(
                id=i + 1,
                name=f"step-{i:02d}-extract-interface",
                deps=[f"step-{i - 1:02d}-extract-interface"] if i else [],
            )
            for i in range(n)
        ]
    )


def loose(n: int) -> WorkGraph:
    """``n`` milestones without any edge: all can run at once."""
    return WorkGraph([Milestone(id=i + 1, name=f"extract-module-{i:02d}-interface") for i in range(n)])


def fan(n: int) -> WorkGraph:
    """One milestone, ``n`` after it side by side, one after them all."""
    kids = [f"extract-module-{i:02d}-interface" for i in range(n)]
    return WorkGraph(
        [
            Milestone(id=1, name="prepare-workspace"),
            *[Milestone(id=i + 2, name=k, deps=["prepare-workspace"]) for i, k in enumerate(kids)],
            Milestone(id=n + 2, name="all-tests", deps=kids),
        ]
    )


def assert_readable(dr: Drawing) -> None:
    """Within one window's width and two windows' height at its own size (no
    label shrunk), every box inside the picture and none overlapping another."""
    assert dr.width <= SCREEN_W + 2 * MARGIN and dr.height <= 2 * SCREEN_H
    boxes = list(dr.nodes.values())
    for n in boxes:
        assert n.x - n.w / 2 >= 0 and n.x + n.w / 2 <= dr.width and 0 <= n.y - n.h / 2 <= n.y + n.h / 2 <= dr.height
    for a, b in itertools.combinations(boxes, 2):
        assert abs(a.x - b.x) >= (a.w + b.w) / 2 or abs(a.y - b.y) >= (a.h + b.h) / 2, (a.name, b.name)
    for _, _, pts, _ in dr.edges:  # no edge leaves the picture or runs through its legend
        assert all(0 <= x <= dr.width and 0 <= y <= dr.height - LEGEND_H for x, y in pts)


@pytest.mark.parametrize("make", [scaffolded, lambda: line(30), lambda: loose(30)], ids=["scaffold", "chain", "loose"])
def test_a_30_milestone_picture_is_wider_than_tall_and_readable(make: Callable[[], WorkGraph]) -> None:
    g = make()
    dr = layout(g, "work item 1: Refactor jinja2 module by module, leaves first (25 modules)")
    assert_readable(dr)
    assert dr.width >= dr.height
    assert len(dr.edges) == sum(len(m.deps) for m in g)


def test_the_scaffolded_package_is_one_piece_left_to_right_with_long_names_in_two_lines() -> None:
    g = scaffolded()
    dr = layout(g)  # was 1831 x 1944: every long edge took a milestone's row, every name its full width
    assert not dr.crossing  # one piece: every edge a curve, none cut
    for m in g:
        for d in m.deps:
            assert dr.nodes[d].x < dr.nodes[m.name].x
    assert dr.nodes["jinja2.environment"].lines == ["jinja2.", "environment"]
    assert dr.nodes["jinja2.utils"].lines == ["jinja2.utils"]  # short enough for one line
    svg = to_svg(g)
    assert "<title>jinja2.environment: blocked</title>" in svg and ">environment</text>" in svg
    titled = layout(g, "work item 1: Refactor jinja2 module by module, leaves first (25 modules)")
    assert titled.width <= 1440 and titled.height <= SCREEN_H  # all of it in one window, at its own size


def test_the_long_edges_into_one_milestone_join_one_line_into_it() -> None:
    dr = layout(scaffolded())
    into: dict[str, list[list[tuple[float, float]]]] = {}
    for _, head, pts, _ in dr.edges:
        if len(pts) > 2:  # a long edge: bends between its ends
            into.setdefault(head, []).append(pts)
    env = into["jinja2.environment"]
    assert len(env) >= 3 and len({pts[-2] for pts in env}) == 1  # one last bend: one line, one arrow into it
    starts = {pts[0] for pts in env}
    assert len(starts) == len(env)  # each from its own milestone


def test_a_chain_folds_into_bands_not_one_long_row() -> None:
    dr = layout(line(30))
    rows = sorted({round(n.y) for n in dr.nodes.values()})
    assert 3 <= len(rows) <= 8 and len(dr.crossing) == len(rows) - 1  # one dashed edge from each band to the next


def test_a_fan_of_30_is_staggered_into_columns_within_two_screens() -> None:
    g = fan(30)
    dr = layout(g)
    assert_readable(dr)
    assert not dr.crossing  # staggered, not cut: every edge drawn whole
    columns = {round(dr.nodes[m.name].x) for m in g if m.deps == ["prepare-workspace"]}
    assert len(columns) >= 3 and dr.width >= 0.8 * dr.height
    for m in g:
        for d in m.deps:
            assert dr.nodes[d].x < dr.nodes[m.name].x


def test_every_edge_is_inside_the_picture_above_its_legend() -> None:
    dr = layout(WorkGraph(random_dag(40, seed=0)))  # a long edge may bend below every box: the picture grows to hold it
    for _, _, pts, _ in dr.edges:
        assert all(0 <= x <= dr.width and 0 <= y <= dr.height - LEGEND_H for x, y in pts)  # above the legend


def test_the_layout_is_the_same_every_time() -> None:
    g = scaffolded()
    first = layout(g)
    again = layout(g)
    assert [(n.x, n.y) for n in first.nodes.values()] == [(n.x, n.y) for n in again.nodes.values()]
    assert [pts for *_, pts, _ in first.edges] == [pts for *_, pts, _ in again.edges]


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

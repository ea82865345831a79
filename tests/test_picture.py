"""The DAG as a picture: SVG, PNG and a self-contained HTML page."""

from __future__ import annotations

import re
import shutil
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from milepost.graph import Action, WorkGraph
from milepost.graph.render import fill
from milepost.picture import layout, to_html, to_png, to_svg
from milepost.planfile import load_plan
from tests.conftest import CLI, EXAMPLES

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
from bench_graph import random_dag


def example_graph() -> WorkGraph:
    g = WorkGraph(load_plan(EXAMPLES / "refactor" / "plan.yaml").to_milestones())
    for n in ("analyze-a", "analyze-b", "analyze-c", "extract-a"):
        g.apply(n, Action.START)
        g.record_attempt(n, True)
    for _ in range(3):
        g.apply("extract-b", Action.START)
        g.record_attempt("extract-b", False, "exit 1")
    return g


def test_svg_draws_every_milestone_in_its_status_colour_left_to_right() -> None:
    g = example_graph()
    svg = to_svg(g, "work item 1")
    root = ET.fromstring(svg)  # well-formed XML
    assert root.tag.endswith("svg")
    names = re.findall(r'font-weight="bold">([^<]+)</text>', svg)
    assert set(names) >= {m.name for m in g}
    dr = layout(g)
    # Layers run left to right: every dependency is drawn left of what needs it.
    for m in g:
        for d in m.deps:
            assert dr.nodes[d].x < dr.nodes[m.name].x
    assert dr.nodes["extract-b"].status == "stuck" and fill("stuck") in svg
    assert dr.nodes["merge"].status == "blocked" and dr.nodes["extract-c"].status == "ready"
    assert {n for n in dr.nodes if dr.nodes[n].critical} == {m.name for m in g.critical_path()}
    assert sum(1 for *_, crit in dr.edges if crit) == len(g.critical_path()) - 1
    assert "critical path" in svg and len(dr.edges) == sum(len(m.deps) for m in g)


def test_a_200_milestone_dag_is_laid_out_without_overlaps() -> None:
    g = WorkGraph(random_dag(200))
    dr = layout(g)
    boxes = [(n.x - n.w / 2, n.y - n.h / 2, n.x + n.w / 2, n.y + n.h / 2) for n in dr.nodes.values()]
    boxes.sort()
    for i, a in enumerate(boxes):
        for b in boxes[i + 1 :]:
            if b[0] >= a[2]:
                break
            assert b[1] >= a[3] or b[3] <= a[1], (a, b)  # no two milestones drawn on each other
    assert all(n.x - n.w / 2 >= 0 and n.x + n.w / 2 <= dr.width for n in dr.nodes.values())


def test_html_is_one_self_contained_page() -> None:
    from milepost.results import MilestoneView

    g = example_graph()
    views = [
        MilestoneView(**m.model_dump(), view=m.status.value, waiting_on=[d.name for d in g.undone_deps(m.name)])
        for m in g
    ]
    page = to_html(g, views, "work item 1: <refactor> & more", "open")
    assert page.startswith("<!doctype html>") and "<svg" in page and "</table>" in page
    assert "&lt;refactor&gt; &amp; more" in page  # escaped
    assert not re.search(r'(src|href)="https?://', page)  # nothing fetched from a network
    assert "A&#x27;s callers depend on its interface" in page or "A's callers" in page
    assert page.count("<tr>") == len(g) + 1


@pytest.mark.skipif(
    not (shutil.which("rsvg-convert") or shutil.which("chromium")), reason="no SVG to PNG converter here"
)
def test_png_where_a_converter_is_installed() -> None:
    png = to_png(to_svg(example_graph()))
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 5_000


def test_graph_command_writes_every_format(cli: CLI, workspace: Path) -> None:
    for p in (EXAMPLES / "refactor").iterdir():
        (shutil.copytree if p.is_dir() else shutil.copy)(p, workspace / p.name)
    cli("plan", "apply", "plan.yaml", check=True)
    svg = cli("graph", "--format", "svg", check=True).out
    assert svg.startswith("<svg") and ">analyze-a</text>" in svg
    cli("graph", "--format", "html", "-o", "dag.html", check=True)
    assert "<table>" in (workspace / "dag.html").read_text()
    mermaid = cli("graph", "--format", "mermaid", check=True).out
    assert mermaid.startswith("flowchart")  # Mermaid stays for --format mermaid
    r = cli("graph", "--format", "png", "-o", "dag.png")
    if shutil.which("rsvg-convert") or shutil.which("chromium"):
        assert r.code == 0 and (workspace / "dag.png").read_bytes()[:4] == b"\x89PNG"
    else:
        assert r.code == 3 and "needs an SVG converter" in r.err


def test_json_graph_holds_every_format_in_one_document(cli: CLI, workspace: Path) -> None:
    import base64
    import json

    cli("plan", "apply", str(EXAMPLES / "refactor" / "plan.yaml"), check=True)
    for fmt, starts in (("svg", "<svg"), ("mermaid", "flowchart"), ("dot", "digraph"), ("html", "<!doctype html>")):
        r = cli("--json", "graph", "--format", fmt, check=True)
        doc = json.loads(r.out)  # one document, nothing else on stdout
        assert doc["format"] == fmt and doc["item"] == 1 and doc["revision"] >= 1, doc.keys()
        assert doc["text"].startswith(starts) and "analyze-a" in doc["text"]
    doc = cli.json("graph", "--format", "json")
    assert {"nodes", "edges", "critical_path"} <= doc.keys()  # the graph's own document, as before
    doc = cli.json("graph", "--format", "svg", "-o", "dag.svg")
    assert doc["output"] == "dag.svg" and doc["bytes"] == len((workspace / "dag.svg").read_bytes())
    assert "text" not in doc and doc["media_type"] == "image/svg+xml"
    if shutil.which("rsvg-convert") or shutil.which("chromium"):
        doc = cli.json("graph", "--format", "png")
        assert doc["media_type"] == "image/png" and "text" not in doc
        assert base64.b64decode(doc["base64"])[:8] == b"\x89PNG\r\n\x1a\n"

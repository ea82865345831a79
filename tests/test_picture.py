"""The DAG as a picture: SVG, PNG and a self-contained HTML page."""

from __future__ import annotations

import json
import os
import random
import re
import shutil
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from milepost.graph import Action, Milestone, WorkGraph
from milepost.planfile import load_plan
from milepost.present.diagram import fill
from milepost.present.picture import layout, to_html, to_png, to_svg
from tests.conftest import CLI, EXAMPLES


def random_dag(n: int, seed: int = 7) -> list[Milestone]:
    """A reproducible DAG of ``n`` milestones, each needing up to 3 of the 50 before it."""
    rnd = random.Random(seed)
    out = []
    for i in range(n):
        k = rnd.randint(0, min(i, 3))
        deps = sorted({f"m{rnd.randrange(max(0, i - 50), i)}" for _ in range(k)}) if i else []
        out.append(Milestone(id=i + 1, name=f"m{i}", deps=deps))
    return out


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
        # ImageMagick may be there (or a stand-in of it that converts nothing): then it is tried, and named
        tried = shutil.which("magick") or shutil.which("convert")
        if not (tried and r.code == 0 and (workspace / "dag.png").read_bytes()[:4] == b"\x89PNG"):
            assert r.code == 3, r.err
            want = f"converting the graph to PNG failed: {Path(tried).name}" if tried else "needs an SVG converter"
            assert want in r.err


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


def test_the_critical_path_follows_the_slow_gates_and_says_so(cli: CLI, workspace: Path) -> None:
    """Three quick gates in a chain and one slow gate alone: by count the
    chain is critical, by the gates' last run times the slow one is."""
    (workspace / "plan.yaml").write_text(
        "objective: o\nmilestones:\n"
        "  - {name: a, gate: 'true'}\n  - {name: b, deps: [a], gate: 'true'}\n  - {name: c, deps: [b], gate: 'true'}\n"
        "  - {name: slow, gate: 'sleep 0.6'}\n"
    )
    cli("plan", "apply", "plan.yaml", check=True)
    assert cli.json("graph")["critical_path"] == ["a", "b", "c"]
    for name in ("a", "b", "c", "slow"):
        cli("start", name, check=True)
        cli("done", name, check=True)
    doc = cli.json("graph")
    assert doc["critical_path"] == ["slow"] and doc["critical_path_by"] == "time"
    assert 0.6 <= doc["critical_path_seconds"] < 10
    text = cli("graph", check=True).out
    assert re.search(r"critical path \(1 milestone, 0\.\d s by the gates' last runs\): slow", text), text
    svg = cli.json("graph", "--format", "svg")["text"]
    assert "critical path: 1 milestone" not in svg  # a path of one milestone draws no line
    assert 'stroke="#212121" stroke-width="2.5"' in svg  # but its box is marked


def test_svg_scales_to_its_window_and_its_legend_says_how_the_path_was_measured() -> None:
    g = example_graph()
    svg = to_svg(g, "work item 1")
    root = ET.fromstring(svg)
    w, h = (float(v) for v in root.attrib["viewBox"].split()[2:])
    assert root.attrib["width"] == "100%" and "height" not in root.attrib  # no fixed size to cut it off
    assert root.attrib["style"] == f"max-width:{w:.0f}px;height:auto"  # never drawn larger than its own size
    assert "critical path: 5 milestones by count; no gate has run yet" in svg
    timed = to_svg(g, durations={"analyze-c": 30.0, "extract-c": 40.0, "analyze-a": 1.0})
    # The gated milestones that have not run count at the median known time (30 s): 30 + 40 + 3 x 30.
    assert "critical path: 5 milestones, 160.0 s by the gates&#x27; last runs" in timed
    assert to_png(svg)[:8] == b"\x89PNG\r\n\x1a\n" if shutil.which("rsvg-convert") or shutil.which("chromium") else h


def test_the_html_page_fits_a_1500_px_window(tmp_path: Path) -> None:
    """A wide DAG (its picture is thousands of pixels wide) in a 1500 px
    headless Chromium: the picture is scaled into the page, nothing is cut
    off and the page does not scroll sideways."""
    from milepost.results import MilestoneView
    from tests.browser import browser, chromium_path

    if chromium_path() is None:
        pytest.skip("no chromium installed here (CI installs it)")
    # Twenty layers of three: a strip thousands of pixels wide, cut into bands (see fit.py).
    g = WorkGraph(
        [
            Milestone(
                id=i + 1, name=f"step-{i // 3:02d}-{'abc'[i % 3]}", deps=[f"step-{i // 3 - 1:02d}-a"] if i >= 3 else []
            )
            for i in range(60)
        ]
    )
    natural = layout(g).width
    assert natural <= 1440 and layout(g).height <= 2 * 900
    views = [MilestoneView(**m.model_dump(), view=m.status.value) for m in g]
    page_file = tmp_path / "dag.html"
    page_file.write_text(to_html(g, views, "a wide DAG", "60 milestones"))
    shots = Path(os.environ.get("MILEPOST_SCREENSHOTS") or tmp_path)
    shots.mkdir(parents=True, exist_ok=True)
    with browser(1500, 950) as page:
        page.goto(page_file.as_uri())
        page.wait_for_text("a wide DAG")
        box = page.eval("JSON.stringify(document.querySelector('.picture svg').getBoundingClientRect())")
        scroll = page.eval("[document.documentElement.scrollWidth, window.innerWidth]")
        page.screenshot(shots / "html-picture.png", 1500, 950)
    box = json.loads(box)
    assert scroll[0] <= scroll[1], scroll  # no sideways scrolling
    assert box["width"] == pytest.approx(natural, abs=1) and box["right"] <= 1500  # at its own size: labels as drawn
    assert box["height"] == pytest.approx(box["width"] * layout(g).height / natural, rel=0.02)  # scaled, not cropped

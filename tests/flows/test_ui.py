"""The Prefect UI, seen by a real (headless) browser: after a drive that
leaves a milestone stuck, the flow run shows the whole milestone DAG (the
milestones done before, the stuck one, and what it blocks), and the summary
artifact shows the DAG as an SVG image.

CI installs Chromium; set MILEPOST_REQUIRE_BROWSER=1 to make its absence an
error instead of a skip. With MILEPOST_SCREENSHOTS=DIR the screenshots are
written there (``make screenshots`` regenerates docs/img/ this way)."""

from __future__ import annotations

import base64
import os
import re
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from milepost.flows.drive import run_drive
from milepost.graph import Action
from milepost.planfile import parse_plan
from milepost.service import Service
from tests.browser import browser, chromium_path
from tests.conftest import EXAMPLES
from tests.flows.conftest import api_get, api_post, flow_run_edges

pytestmark = pytest.mark.xdist_group("prefect")

NAMES = ["analyze-a", "analyze-b", "analyze-c", "extract-a", "extract-b", "extract-c", "merge", "test", "commit"]


def _need_browser() -> None:
    if chromium_path() is None:
        if os.environ.get("MILEPOST_REQUIRE_BROWSER") == "1":
            pytest.fail("a browser is required (MILEPOST_REQUIRE_BROWSER=1) but chromium was not found")
        pytest.skip("no chromium installed here (CI installs it)")


def _shots(tmp: Path) -> Path:
    out = os.environ.get("MILEPOST_SCREENSHOTS")
    folder = Path(out) if out else tmp
    folder.mkdir(parents=True, exist_ok=True)
    return folder


@pytest.fixture(scope="module")
def stuck_drive(prefect_api: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """The example refactor: two milestones done by hand, then a bad edit to
    module B, then a drive: extract-b and extract-c get stuck, merge, test and
    commit are blocked behind them."""
    from milepost.store import Store
    from milepost.workspace import init_workspace

    ws = tmp_path_factory.mktemp("ui") / "ws"
    shutil.copytree(EXAMPLES / "refactor", ws)
    w = init_workspace(ws)
    svc = Service(Store.open(w.url, w.home, w.root, create=True))
    item = svc.apply_plan(parse_plan((ws / "plan.yaml").read_text())).id
    for name in ("analyze-a", "analyze-b"):
        svc.act(name, Action.START, item=item)
        assert svc.done(name, item=item).passed
    with open(ws / "src" / "kv" / "mod_b.py", "a") as f:
        f.write("def broken(:\n")
    summary = run_drive(svc, item, max_parallel=3)
    assert not summary.ok and summary.flow_run_url and summary.flow_run_id
    yield {"svc": svc, "item": item, "summary": summary, "api": prefect_api}
    svc.close()


def test_the_flow_run_graph_holds_every_milestone_with_its_edges(stuck_drive: dict[str, Any]) -> None:
    api, summary, svc = stuck_drive["api"], stuck_drive["summary"], stuck_drive["svc"]
    labels, edges = flow_run_edges(api, summary.flow_run_id)
    assert labels == set(NAMES)  # the ones done before and the blocked ones too
    dag = {(d, m.name) for m in svc.get_item(stuck_drive["item"]).milestones for d in m.deps}
    assert dag <= edges
    runs = api_post(api, "/task_runs/filter", {"flow_runs": {"id": {"any_": [summary.flow_run_id]}}, "limit": 200})
    states: dict[str, set[tuple[str, str]]] = {}
    for r in runs:
        states.setdefault(r["name"], set()).add((r["state_type"], r["state_name"]))
    assert states["analyze-a"] == {("COMPLETED", "Done earlier")}
    assert states["merge"] == states["test"] == states["commit"] == {("CANCELLED", "Blocked")}
    assert ("FAILED", "Stuck") in states["extract-b"] and ("FAILED", "Needs fix") in states["extract-b"]
    assert all(r["state_type"] in ("COMPLETED", "FAILED", "CANCELLED") for r in runs)  # every bar ends
    blocked = next(r for r in runs if r["name"] == "merge")
    assert "extract-b (stuck)" in blocked["state"]["message"]


def test_the_flow_run_page_shows_every_milestone(stuck_drive: dict[str, Any], tmp_path: Path) -> None:
    _need_browser()
    summary = stuck_drive["summary"]
    shots = _shots(tmp_path)
    with browser() as page:
        page.goto(summary.flow_run_url)
        page.wait_for_text("Task Runs", "Failed", f"item-{stuck_drive['item']}")
        time.sleep(2)  # the graph zooms into place
        page.screenshot(shots / "flow-run-graph.png", 1500, 900)
        assert page.click_text("Task Runs")
        text = page.wait_for_text(*NAMES)
        assert "Blocked" in text and "Done earlier" in text and "Stuck" in text
        page.screenshot(shots / "task-runs.png", 1500, 1300)
    assert (shots / "flow-run-graph.png").stat().st_size > 40_000  # a drawn graph, not a blank page


def test_the_summary_artifact_shows_the_dag_as_an_svg_image(stuck_drive: dict[str, Any], tmp_path: Path) -> None:
    _need_browser()
    api, summary = stuck_drive["api"], stuck_drive["summary"]
    arts = api_post(
        api,
        "/artifacts/filter",
        {"artifacts": {"flow_run_id": {"any_": [summary.flow_run_id]}, "type": {"any_": ["markdown"]}}},
    )
    ui = summary.flow_run_url.split("/runs/")[0]
    shots = _shots(tmp_path)
    with browser() as page:
        page.goto(f"{ui}/artifacts/artifact/{arts[0]['id']}")
        page.wait_for_text("not all done")
        src = page.eval("(document.querySelector('img[src^=\"data:image/svg+xml\"]') || {}).src || ''")
        page.screenshot(shots / "summary-artifact.png", 1500, 900)
    assert src.startswith("data:image/svg+xml;base64,")
    svg = base64.b64decode(src.split(",", 1)[1]).decode()
    assert all(f">{n}</text>" in svg for n in NAMES) and "critical path" in svg


def test_a_500_milestone_drive_still_draws_in_the_ui(prefect_api: str, service: Service, tmp_path: Path) -> None:
    """495 milestones done before the drive, 5 run by it: 500 nodes."""
    lines = ["objective: five hundred milestones", "milestones:"]
    for i in range(500):
        deps = f", deps: [m{i - 1}]" if i % 10 else ""
        lines.append(f"  - {{name: m{i}{deps}}}")
    item = service.apply_plan(parse_plan("\n".join(lines) + "\n")).id
    for i in range(495):
        service.act(f"m{i}", Action.START, item=item)
        service.done(f"m{i}", item=item)
    summary = run_drive(service, item)
    assert summary.ok and summary.flow_run_id
    graph = api_get(prefect_api, f"/flow_runs/{summary.flow_run_id}/graph-v2")
    assert len(graph["nodes"]) == 500
    _need_browser()
    with browser() as page:
        page.goto(summary.flow_run_url)
        text = page.wait_for_text("500 Task runs", timeout=120)
        assert re.search(r"Completed", text)


REDRIVE_PLAN = """objective: a twenty-milestone refactor, driven twice
milestones:
  - {name: analyze-a, gate: 'true'}
  - {name: analyze-b, gate: 'true'}
  - {name: analyze-c, gate: 'true'}
  - {name: analyze-d, gate: 'true'}
  - {name: analyze-e, gate: 'true'}
  - {name: extract-a, deps: [analyze-a], gate: 'true'}
  - {name: extract-b, deps: [analyze-b], gate: 'true'}
  - {name: extract-c, deps: [analyze-c], gate: 'test -f fixed', retries: 0}
  - {name: extract-d, deps: [analyze-d], gate: 'true'}
  - {name: extract-e, deps: [analyze-e], gate: 'true'}
  - {name: merge, deps: [extract-a, extract-b, extract-c, extract-d, extract-e], gate: 'true'}
  - {name: test-unit, deps: [merge], gate: 'true'}
  - {name: test-integration, deps: [merge], gate: 'true'}
  - {name: test-e2e, deps: [merge], gate: 'true'}
  - {name: docs-api, deps: [test-unit], gate: 'true'}
  - {name: docs-guide, deps: [test-integration], gate: 'true'}
  - {name: lint, deps: [merge], gate: 'true'}
  - {name: package, deps: [test-unit, test-integration, test-e2e, lint], gate: 'true'}
  - {name: release-notes, deps: [docs-api, docs-guide], gate: 'test -f notes', retries: 0}
  - {name: ship, deps: [package, release-notes], gate: 'true'}
"""


def _times(api: str, flow_run_id: str) -> tuple[dict[str, tuple[str, str]], set[tuple[str, str]], set[str]]:
    """(start, end) of every task run of the flow run's graph by label, its
    edges, and which of them are plan nodes."""
    graph = api_get(api, f"/flow_runs/{flow_run_id}/graph-v2")
    labels = {nid: node["label"] for nid, node in graph["nodes"]}
    times = {node["label"]: (node["start_time"], node["end_time"]) for _, node in graph["nodes"]}
    edges = {(labels[p["id"]], node["label"]) for _, node in graph["nodes"] for p in node["parents"]}
    runs = api_post(api, "/task_runs/filter", {"flow_runs": {"id": {"any_": [flow_run_id]}}, "limit": 200})
    plan = {r["name"] for r in runs if "milepost-plan-node" in r["tags"]}
    return times, edges, plan


def test_a_redrive_draws_its_plan_nodes_in_columns_not_a_pile(
    prefect_api: str, tmp_path_factory: pytest.TempPathFactory, tmp_path: Path
) -> None:
    """A 20-milestone plan: the first drive gets extract-c stuck (ten
    milestones blocked behind it), the re-drive after a fix finds nine done
    before it and gets release-notes stuck (ship blocked). The plan nodes
    (task runs made for what a drive did not run) are placed on the UI's time
    axis a column per DAG level, after what they depend on, not piled where
    they were made."""
    from milepost.store import Store
    from milepost.workspace import init_workspace

    ws = tmp_path_factory.mktemp("redrive") / "ws"
    ws.mkdir()
    w = init_workspace(ws)
    svc = Service(Store.open(w.url, w.home, w.root, create=True))
    item = svc.apply_plan(parse_plan(REDRIVE_PLAN)).id
    first = run_drive(svc, item)
    assert not first.ok and "stuck: extract-c" in first.message
    (ws / "fixed").touch()
    svc.act("extract-c", Action.RESET, reason="the file is there now", item=item)
    again = run_drive(svc, item)
    assert not again.ok and "stuck: release-notes" in again.message and again.flow_run_id
    for summary, n_plan in ((first, 10), (again, 10)):
        assert summary.flow_run_id
        times, edges, plan = _times(prefect_api, summary.flow_run_id)
        assert len(times) == 20 and len(plan) == n_plan
        for parent, child in edges:
            if parent in plan or child in plan:  # a plan node starts after what it depends on has ended
                assert times[parent][1] <= times[child][0], (parent, child, times[parent], times[child])
    # The re-drive: the nine done before it fill the run's first moments, two columns, before any gate.
    earlier = {n for n in plan if n != "ship"}
    assert earlier == {f"analyze-{x}" for x in "abcde"} | {f"extract-{x}" for x in "abde"}
    assert len({times[n][0] for n in earlier if n.startswith("analyze")}) == 1
    assert len({times[n][0] for n in earlier if n.startswith("extract")}) == 1
    assert max(times[n][1] for n in earlier) < times["extract-c"][0]
    assert times["ship"][0] > times["release-notes"][1]  # the blocked one after the stuck one
    shots = _shots(tmp_path)
    _need_browser()
    with browser() as page:
        page.goto(again.flow_run_url or "")
        page.wait_for_text("Task Runs", "Failed", "20 Task runs")
        time.sleep(2)  # the graph zooms into place
        page.screenshot(shots / "redrive-graph.png", 1500, 900)
    assert (shots / "redrive-graph.png").stat().st_size > 40_000
    svc.close()

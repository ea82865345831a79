"""One real Prefect server for every drive test (``prefect server start`` on
loopback, started through milepost's own server management), and helpers."""

from __future__ import annotations

import json
import os
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from milepost.flows.server import server_start, server_stop

# All Prefect tests share one server: keep them on one xdist worker.
pytestmark = pytest.mark.xdist_group("prefect")


@pytest.fixture(scope="session")
def prefect_api(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    home = tmp_path_factory.mktemp("prefect-server") / ".milepost"
    home.mkdir()
    info = server_start(home, timeout=240)
    assert info.api_url and info.healthy
    saved = {k: os.environ.get(k) for k in ("PREFECT_API_URL", "PREFECT_UI_URL", "PREFECT_HOME")}
    os.environ["PREFECT_API_URL"] = info.api_url
    os.environ["PREFECT_UI_URL"] = info.ui_url or ""
    os.environ["PREFECT_HOME"] = str(home / "prefect")
    os.environ.setdefault("DO_NOT_TRACK", "1")
    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    os.environ.setdefault("PREFECT_LOGGING_HANDLERS_CONSOLE_LEVEL", "CRITICAL")
    try:
        yield info.api_url
    finally:
        server_stop(home)
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def api_get(api: str, path: str) -> Any:
    with urllib.request.urlopen(f"{api}{path}", timeout=30) as r:
        return json.loads(r.read())


def api_post(api: str, path: str, body: dict[str, Any]) -> Any:
    req = urllib.request.Request(
        f"{api}{path}", data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}, method="POST"
    )
    with urllib.request.urlopen(req, timeout=30) as r:
        return json.loads(r.read())


def flow_run_edges(api: str, flow_run_id: str) -> tuple[set[str], set[tuple[str, str]]]:
    """Task-run labels and the (parent, child) edges the UI draws, de-duplicated
    (graph-v2 repeats parents on SQLite)."""
    graph = api_get(api, f"/flow_runs/{flow_run_id}/graph-v2")
    labels = {nid: node["label"] for nid, node in graph["nodes"]}
    edges = set()
    for nid, node in graph["nodes"]:
        for parent in node["parents"]:
            edges.add((labels[parent["id"]], labels[nid]))
    return set(labels.values()), edges


def write_plan(ws: Path, text: str) -> Path:
    p = ws / "plan.yaml"
    p.write_text(text)
    return p

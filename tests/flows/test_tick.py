"""The scheduler tick and the served tick flow, against the real server."""

from __future__ import annotations

import itertools
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import CLI, wait_until
from tests.flows.conftest import api_get, api_post, served

pytestmark = pytest.mark.xdist_group("prefect")


def test_tick_drives_current_first_then_queued_oldest_first(prefect_api: str, cli: CLI, workspace: Path) -> None:
    order = workspace / "order.txt"
    for name in ("older", "newer", "current"):
        cli("item", "create", name, check=True)
        cli("add", "work", "--gate", f"echo {name} >> {order}", check=True)
    cli("item", "create", "nothing ready", check=True)  # no milestone: not driven
    cli("item", "create", "timer", check=True)
    cli("add", "work", "--gate", f"echo timer >> {order}", check=True)
    cli("item", "wait", "--wake", "timer", "--until", "2020-01-01T00:00:00Z", "--reason", "cool down", check=True)
    cli("item", "pick", "3", check=True)
    r = cli("--json", "tick")
    assert r.code == 0, r.err
    data = r.data
    assert data["expired"] == ["work item 5: timer expired"]
    assert [d["item"] for d in data["driven"]] == [3, 1, 2, 5]
    assert all(d["ok"] for d in data["driven"])
    assert order.read_text().split() == ["current", "older", "newer", "timer"]
    assert cli.json("tick")["driven"] == []  # nothing left to drive


def test_serve_runs_ticks_as_a_served_flow(prefect_api: str, cli: CLI, workspace: Path) -> None:
    marker = workspace / "ticked"
    cli("item", "create", "served", check=True)
    cli("add", "work", "--gate", f"touch {marker}", check=True)
    with served(cli, "serve", "--interval", "2", log=workspace.parent / "serve.log") as alive:
        wait_until(marker.exists, 180, "a tick to run", output=alive)
        wait_until(lambda: cli.json("list")["milestones"][0]["status"] == "done", 30, "the tick's record", output=alive)
        # What the tick did, in serve's output: its drive's lines and one line for the item.
        wait_until(lambda: "tick: work item 1: ok: " in alive(), 30, "the tick's line", output=alive)
        assert "done   work (attempt 1" in alive(), alive()
    runs = api_post(prefect_api, "/flow_runs/filter", {"flows": {"name": {"any_": ["milepost-tick"]}}})
    assert any(r["state_type"] == "COMPLETED" for r in runs)


def test_served_ticks_never_overlap(prefect_api: str, cli: CLI, workspace: Path) -> None:
    """A tick that outlasts the interval delays the next one: with a 4 s gate
    and a tick every second, no two served tick runs overlap in time."""
    cli("item", "create", "slow", check=True)
    cli("add", "slow", "--gate", "sleep 4", check=True)
    name = f"no-overlap-{workspace.parent.name}"
    with served(cli, "serve", "--interval", "1", "--name", name, log=workspace.parent / "serve.log") as alive:
        wait_until(
            lambda: cli.json("list")["milestones"][0]["status"] == "done", 240, "a tick to drive it", output=alive
        )
        dep = api_get(prefect_api, f"/deployments/name/milepost-tick/{name}")

        def ended() -> list[dict[str, Any]]:
            found = api_post(prefect_api, "/flow_runs/filter", {"deployments": {"id": {"any_": [dep["id"]]}}})
            return [r for r in found if r["start_time"] and r["end_time"]]

        wait_until(lambda: len(ended()) >= 3, 180, "3 ticks to end", output=alive)
    runs = sorted(ended(), key=lambda r: r["start_time"])
    spans = [(datetime.fromisoformat(r["start_time"]), datetime.fromisoformat(r["end_time"])) for r in runs]
    for (_, end), (start, _) in itertools.pairwise(spans):
        assert start >= end, spans
    assert spans[0][1] - spans[0][0] >= timedelta(seconds=4)  # the tick that ran the gate outlasted the interval


def test_deploy_then_a_worker_runs_a_tick(prefect_api: str, cli: CLI, workspace: Path) -> None:
    import os
    import subprocess
    import sys

    marker = workspace / "worked"
    cli("item", "create", "deployed", check=True)
    cli("add", "work", "--gate", f"touch {marker}", check=True)
    dep = cli.json("deploy", "--pool", "milepost-test-pool")
    # What it prints to start a worker names the server (`prefect worker start` alone refuses to start).
    assert dep["worker"] == f"PREFECT_API_URL={prefect_api} prefect worker start --pool milepost-test-pool", dep
    assert f"PREFECT_API_URL={prefect_api} prefect worker start" in cli("deploy", "--pool", "milepost-test-pool").out
    run = api_post(prefect_api, f"/deployments/{dep['deployment_id']}/create_flow_run", {})
    worker = Path(sys.executable).with_name("prefect")
    p = subprocess.run(
        [str(worker), "worker", "start", "--pool", "milepost-test-pool", "--run-once"],
        cwd="/",  # the deployment says where the workspace is
        env={k: v for k, v in os.environ.items() if not k.startswith("MILEPOST_")},
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert marker.exists(), p.stdout[-2000:] + p.stderr[-2000:]
    assert cli.json("list")["milestones"][0]["status"] == "done"
    from tests.flows.conftest import api_get

    assert api_get(prefect_api, f"/flow_runs/{run['id']}")["state_type"] == "COMPLETED"


def test_a_tick_does_not_wait_for_another_driver_on_the_item(prefect_api: str, cli: CLI, workspace: Path) -> None:
    """Where a drive waits for other live drivers (flows/waiting.py), the
    scheduler's tick runs what it can and goes on: it does not hold every
    other item up behind a gate someone else runs."""
    go = workspace / "go"
    cli("item", "create", "shared", check=True)
    cli("add", "slow", "--gate", f"echo slow >> ran.txt; while [ ! -e {go} ]; do sleep 0.1; done", check=True)
    cli("add", "other", "--gate", "echo other >> ran.txt", check=True)
    cli("start", "slow", check=True)
    by_hand = cli.popen("done", "slow")  # holds slow's lease while its gate runs
    try:
        wait_until(lambda: (workspace / "ran.txt").exists(), 60, "slow's gate to start", step=0.1)
        r = cli("--json", "tick", timeout=90)
        assert r.code == 0, r.err
        assert [(d["item"], d["ok"]) for d in r.data["driven"]] == [(1, False)]
        assert "in progress: slow" in r.data["driven"][0]["message"]
        assert by_hand.poll() is None  # the tick ended while slow's gate still ran
        assert (workspace / "ran.txt").read_text().split() == ["slow", "other"]
    finally:
        go.touch()
        by_hand.communicate(timeout=60)
    assert {m["name"]: m["status"] for m in cli.json("list")["milestones"]} == {"slow": "done", "other": "done"}

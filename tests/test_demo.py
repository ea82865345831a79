"""`make demo`'s script, run as a user runs it: no Prefect settings at all, so
the first drive starts the workspace's Prefect server in the background, with
its home in the workspace, and the second finds it up. That server must show
every run (it records a drive's task runs from their events within seconds of
the drive's end)."""

from __future__ import annotations

import os
import shlex
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import CLI, EXAMPLES, wait_until
from tests.flows.conftest import api_post

# About a minute on a quiet 2-core machine; over 300 s (the suite's default timeout) at a load average of 10.
pytestmark = [pytest.mark.xdist_group("demo"), pytest.mark.timeout(900)]
FINAL = {"COMPLETED", "FAILED", "CANCELLED", "CRASHED"}


def test_the_demo_runs_and_its_prefect_runs_stay_with_the_workspace(tmp_path: Path, milepost_bin: Path) -> None:
    ws = tmp_path / "demo-workspace"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PREFECT_", "MILEPOST_"))}
    env["PATH"] = f"{milepost_bin}:{env['PATH']}"
    p = subprocess.run(
        ["bash", str(EXAMPLES / "demo.sh"), str(ws)], env=env, capture_output=True, text=True, timeout=600
    )
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    assert "demo finished" in p.stdout
    # Every command is echoed as a shell reads it: copied, it runs the same words.
    echoed = [
        line[len("\x1b[1m$ ") : -len("\x1b[0m")] for line in p.stdout.splitlines() if line.startswith("\x1b[1m$ ")
    ]
    assert "milepost done analyze-a --verdict 'looks right'" in echoed
    assert "milepost reset extract-b --reason 'restored src/kv/mod_b.py'" in echoed
    assert all(shlex.split(line)[0] == "milepost" for line in echoed)
    assert (ws / ".milepost" / "prefect").is_dir()  # Prefect's home stayed with the project
    assert p.stderr.count("Prefect server up in the background: UI http://127.0.0.1:") == 1, p.stderr

    cli = CLI(ws, env=env)
    items = cli.json("item", "list", "--filter", "all")["items"]
    assert len(items) == 2
    for it in items:  # both plans ended with every milestone done
        assert all(m["status"] == "done" for m in cli.json("list", "--item", str(it["id"]))["milestones"])
    driven = items[1]["id"]
    gate_runs = sum(
        len(cli.json("runs", m["name"], "--item", str(driven))["runs"])
        for m in cli.json("list", "--item", str(driven))["milestones"]
    )

    info = cli.json("server", "start")  # the one the first drive started, still up
    try:
        assert info["started_by"] == "drive", info
        api = info["api_url"]
        flow_runs = api_post(api, "/flow_runs/filter", {"flows": {"name": {"any_": ["drive-workgraph"]}}})
        flow_runs.sort(key=lambda fr: fr["start_time"])
        # The bad edit's drive fails naming what is stuck; the drive after the reset completes.
        assert [fr["state_type"] for fr in flow_runs] == ["FAILED", "COMPLETED"]
        runs_of = {"flow_runs": {"id": {"any_": [fr["id"] for fr in flow_runs]}}}

        def recorded() -> list[dict[str, Any]]:
            return [t for t in api_post(api, "/task_runs/filter", runs_of) if t["state_type"] in FINAL]

        def gates_of(task_runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
            return [t for t in task_runs if "milepost-plan-node" not in t["tags"] and not t["name"].startswith("fix ")]

        wait_until(lambda: len(gates_of(recorded())) >= gate_runs, timeout=60, what="the gates' task runs recorded")
        task_runs = recorded()
        assert len(gates_of(task_runs)) == gate_runs  # not one gate's task run lost
        # The rest are the plan's other milestones, drawn in the flow-run graph (done earlier, blocked).
        assert {t["state_name"] for t in task_runs if "milepost-plan-node" in t["tags"]} >= {"Done earlier"}
    finally:
        cli("server", "stop", check=True)

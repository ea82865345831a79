"""`make demo`'s script, run as a user runs it: no Prefect settings at all, so
both drives use Prefect's temporary server with its home in the workspace.
Then the workspace's own server, started on that home, must show every run:
the drive waits until the temporary server has recorded them before it exits."""

from __future__ import annotations

import os
import shlex
import subprocess
from pathlib import Path

import pytest

from tests.conftest import CLI, EXAMPLES
from tests.flows.conftest import api_post

pytestmark = pytest.mark.xdist_group("demo")


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

    info = cli.json("server", "start")
    try:
        api = info["api_url"]
        flow_runs = api_post(api, "/flow_runs/filter", {"flows": {"name": {"any_": ["drive-workgraph"]}}})
        flow_runs.sort(key=lambda fr: fr["start_time"])
        # The bad edit's drive fails naming what is stuck; the drive after the reset completes.
        assert [fr["state_type"] for fr in flow_runs] == ["FAILED", "COMPLETED"]
        task_runs = api_post(api, "/task_runs/filter", {"flow_runs": {"id": {"any_": [fr["id"] for fr in flow_runs]}}})
        gates = [t for t in task_runs if "milepost-plan-node" not in t["tags"] and not t["name"].startswith("fix ")]
        assert len(gates) == gate_runs  # not one gate's task run lost with the temporary server
        # The rest are the plan's other milestones, drawn in the flow-run graph (done earlier, blocked).
        assert {t["state_name"] for t in task_runs if "milepost-plan-node" in t["tags"]} >= {"Done earlier"}
    finally:
        cli("server", "stop", check=True)

"""The MCP `drive` tool runs a real drive (a Prefect flow against the test
server) and returns its summary."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import anyio
import pytest

from tests.conftest import CLI, EXAMPLES
from tests.test_mcp import call, server

pytestmark = pytest.mark.xdist_group("prefect")


def test_the_drive_tool_drives_the_example_to_done(prefect_api: str, tmp_path: Path) -> None:
    ws = tmp_path / "refactor"
    shutil.copytree(EXAMPLES / "refactor", ws)
    CLI(ws)("init", check=True)
    plan = (ws / "plan.yaml").read_text()
    prefect = {k: v for k, v in os.environ.items() if k.startswith(("PREFECT_", "DO_NOT_TRACK"))}

    async def go() -> None:
        async with server(ws, tmp_path / "mcp.log", **prefect) as s:
            await call(s, "work_item", action="create", plan=plan)
            summary = await call(s, "drive", max_parallel=2)
            assert summary["ok"] is True and summary["gate_runs"] == 9, summary
            assert set(summary["milestones"].values()) == {"done"}
            assert summary["flow_run"]
            graph = await call(s, "graph")  # the server's cached graph saw the drive's writes
            assert graph["next"] is None and graph["why"].startswith("all 9 milestones are done")

    anyio.run(go)

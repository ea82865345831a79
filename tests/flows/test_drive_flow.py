"""The drive's flow (flows/drive.py, ``DriveFlow``): its plain parameters go
to the API as Prefect's own ``serialize_parameters`` would send them, without
importing FastAPI's encoder in the drive's process (docs/benchmarks.md, "The
flow run's parameters"). These tests pin the fast path on Prefect: when
Prefect sends other values, or a drive imports FastAPI anyway, they fail and
the override has no reason left to stay."""

from __future__ import annotations

import json
import textwrap
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from prefect import Flow
from prefect.task_runners import ThreadPoolTaskRunner

from milepost.flows.drive import DriveFlow, drive_flow, drive_workgraph, drive_workgraph_body
from tests.conftest import CLI
from tests.flows.conftest import run_script

pytestmark = pytest.mark.xdist_group("prefect")

PLAIN: list[dict[str, Any]] = [
    {"item_id": 1, "max_parallel": 2, "until": None},
    {"item_id": 17, "max_parallel": 1, "until": "m3"},
    {"item_id": 2, "max_parallel": 4, "until": "ünïcode name"},
    {"flag": True, "ratio": 0.5, "none": None},
]


@pytest.mark.parametrize("params", PLAIN, ids=lambda p: ",".join(p))
def test_plain_parameters_are_sent_as_prefect_would_send_them(params: dict[str, Any]) -> None:
    mine = drive_workgraph.serialize_parameters(params)
    prefects = Flow.serialize_parameters(drive_workgraph, params)
    assert mine == prefects and json.dumps(mine) == json.dumps(prefects)
    assert mine is not params  # (a copy: Prefect's caller may keep its own)


def test_other_parameters_go_through_prefects_encoder() -> None:
    params = {"when": datetime(2026, 12, 4, 15, 0, tzinfo=UTC), "where": Path("/tmp/x"), "item_id": 3}
    mine = drive_workgraph.serialize_parameters(params)
    assert mine == Flow.serialize_parameters(drive_workgraph, params)
    assert isinstance(mine["when"], str) and mine["where"] == "/tmp/x", mine


def test_a_drive_flow_with_options_keeps_its_kind_and_its_body() -> None:
    runner = ThreadPoolTaskRunner(max_workers=3)
    configured = drive_flow(task_runner=runner)
    assert isinstance(configured, DriveFlow) and isinstance(drive_workgraph, DriveFlow)
    assert configured.task_runner is runner and configured.name == drive_workgraph.name == "drive-workgraph"
    assert configured.fn is drive_workgraph_body is drive_workgraph.fn


DRIVE_ALONE = textwrap.dedent(
    """
    import json, sys
    from milepost.service import Service
    from milepost.flows.drive import run_drive

    summary = run_drive(Service.open(), 1, max_parallel=2)
    loaded = sorted(m for m in sys.modules if m == "fastapi" or m.startswith("fastapi."))
    print(json.dumps({"ok": summary.ok, "runs": summary.gate_runs, "fastapi": loaded}))
    """
)


def test_a_drive_does_not_import_fastapi(cli: CLI, workspace: Path, prefect_api: str) -> None:
    """A whole drive, in a process of its own, against a Prefect server: its
    flow run is made and ends well without FastAPI in the process."""
    cli("item", "create", "plain", check=True)
    cli("add", "one", "--gate", "true", check=True)
    cli("add", "two", "--deps", "one", "--gate", "true", check=True)
    out = run_script(cli, workspace, DRIVE_ALONE)
    assert out == {"ok": True, "runs": 2, "fastapi": []}, out

"""The Prefect UI, seen by a real (headless) browser: the flow run of a drive
renders with its name and its task runs. CI installs Chromium; set
MILEPOST_REQUIRE_BROWSER=1 to make its absence an error instead of a skip."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from milepost.flows.drive import run_drive
from milepost.planfile import parse_plan
from milepost.service import Service

pytestmark = pytest.mark.xdist_group("prefect")


def _chromium() -> str:
    found = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
    if found is None:
        if os.environ.get("MILEPOST_REQUIRE_BROWSER") == "1":
            pytest.fail("a browser is required (MILEPOST_REQUIRE_BROWSER=1) but chromium was not found")
        pytest.skip("no chromium installed here (CI installs it)")
    return found


def test_flow_run_page_shows_the_drive(prefect_api: str, service: Service, tmp_path: Path) -> None:
    browser = _chromium()
    item = service.apply_plan(
        parse_plan(
            "objective: seen in the browser\nmilestones:\n"
            "  - {name: compile-all, gate: 'true'}\n"
            "  - {name: unit-tests, deps: [compile-all], gate: 'true'}\n"
        )
    ).id
    summary = run_drive(service, item)
    assert summary.ok and summary.flow_run_url
    shot = tmp_path / "flow-run.png"
    common = [
        browser, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync",
        f"--user-data-dir={tmp_path / 'profile'}", "--window-size=1400,1000", "--virtual-time-budget=20000",
    ]  # fmt: skip
    dom = subprocess.run([*common, "--dump-dom", summary.flow_run_url], capture_output=True, text=True, timeout=120)
    assert f"item-{item}: seen in the browser" in dom.stdout
    assert "drive-workgraph" in dom.stdout and "2 Task runs" in dom.stdout
    subprocess.run([*common, f"--screenshot={shot}", summary.flow_run_url], capture_output=True, timeout=120)
    assert shot.stat().st_size > 20_000  # a rendered page, not a blank one

"""Where CI looks: `drive --junit FILE` and GITHUB_STEP_SUMMARY, read back
with a JUnit library."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from junitparser import Failure, JUnitXml, Skipped

from tests.conftest import CLI, EXAMPLES

pytestmark = pytest.mark.xdist_group("prefect")


def test_junit_report_and_step_summary_of_a_drive_with_a_stuck_milestone(
    prefect_api: str, cli: CLI, workspace: Path
) -> None:
    for p in (EXAMPLES / "refactor").iterdir():
        (shutil.copytree if p.is_dir() else shutil.copy)(p, workspace / p.name)
    cli("plan", "apply", "plan.yaml", check=True)
    with open(workspace / "src" / "kv" / "mod_b.py", "a") as f:
        f.write("def broken(:\n")
    summary_file = workspace / "step-summary.md"
    summary_file.write_text("earlier steps\n")
    r = cli("drive", "--junit", "report.xml", "--max-parallel", "3", GITHUB_STEP_SUMMARY=str(summary_file))
    assert r.code == 1, r.err

    xml = JUnitXml.fromfile(str(workspace / "report.xml"))
    suites = list(xml)
    assert len(suites) == 1
    suite = suites[0]
    assert suite.name.startswith("work item 1: Extract interfaces")
    cases = {c.name: c for c in suite}
    assert list(cases) == [
        "analyze-a",
        "analyze-b",
        "analyze-c",
        "extract-a",
        "extract-b",
        "extract-c",
        "merge",
        "test",
        "commit",
    ]
    # Module B is broken: analyze-b's gate (it compiles B) and extract-c's (its tests import B) get stuck.
    assert cases["analyze-a"].is_passed and cases["extract-a"].is_passed
    failure = cases["analyze-b"].result[0]
    assert isinstance(failure, Failure) and failure.type == "stuck" and failure.message.startswith("stuck: ")
    assert "attempt 3" in (failure.text or "") and "SyntaxError" in (failure.text or "")
    skipped = cases["extract-b"].result[0]
    assert isinstance(skipped, Skipped) and skipped.message == "blocked by analyze-b (stuck)"
    merge = cases["merge"].result[0]
    assert isinstance(merge, Skipped) and "extract-c (stuck)" in merge.message
    props = {p.get("name"): p.get("value") for p in cases["analyze-b"]._elem.iter("property")}
    assert props["budget"] == "3/3" and props["status"] == "stuck" and props["last_attempt"] == "3"
    assert float(props["total_time"]) >= float(cases["analyze-b"].time) > 0
    assert (suite.tests, suite.failures, suite.skipped) == (9, 2, 4)
    assert float(cases["analyze-b"].time) > 0

    text = summary_file.read_text()
    assert text.startswith("earlier steps\n")  # appended, not replaced
    assert "### milepost: work item 1" in text and "```mermaid" in text and "| 2 | analyze-b | stuck |" in text

"""Small untruths of issue 42, each pinned: what the docs, --help, the live
table and pyproject.toml's comments say is what is there."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from milepost.cli import cli
from milepost.planfile import MAX_PROBLEMS
from tests.conftest import CLI

ROOT = Path(__file__).resolve().parents[1]


def test_plan_apply_help_says_how_many_problems_it_reports() -> None:
    shown = CliRunner().invoke(cli, ["plan", "apply", "--help"]).output
    said = re.search(r"the first (\d+)", " ".join(shown.split()))
    assert said is not None and int(said.group(1)) == MAX_PROBLEMS, shown


def test_architecture_names_every_module_of_gates_and_the_doers_code() -> None:
    text = (ROOT / "docs/architecture.md").read_text()
    table = "\n".join(line for line in text.splitlines() if line.startswith("| `"))
    modules = [p.name for p in (ROOT / "gates").glob("*.py") if p.name != "__init__.py"]
    modules += ["doer_attempts.py", "do_evidence.py", "early.py", "server_keeper.py"]
    missing = [m for m in modules if f"{m}`" not in table]
    assert missing == [], missing


def test_pyproject_comments_name_files_and_sections_that_exist() -> None:
    text = (ROOT / "pyproject.toml").read_text()
    comments = [line.split("#", 1)[1] for line in text.splitlines() if "#" in line]
    files = {f for c in comments for f in re.findall(r"\btests/[\w/]+\.py\b", c)}
    assert files and all((ROOT / f).is_file() for f in files), files
    sections = {(d, s) for c in comments for d, s in re.findall(r"(docs/[\w-]+\.md), \"([^\"]+)\"", c)}
    assert sections, comments
    for doc, section in sections:
        headings = [h.lstrip("#").strip() for h in (ROOT / doc).read_text().splitlines() if h.startswith("#")]
        assert any(h.startswith(section) for h in headings), (doc, section)


def test_the_live_table_says_budget_like_the_summary() -> None:
    from rich.console import Console

    from milepost.present.live import LiveReporter

    console = Console(width=120, record=True, force_terminal=False)
    console.print(LiveReporter(console, [])._render())
    header = console.export_text()
    assert "budget" in header and "tries" not in header, header


def test_runs_through_a_pipe_honours_columns(cli: CLI, monkeypatch: pytest.MonkeyPatch) -> None:
    cli("item", "create", "wide", check=True)
    cli("add", "x", "--gate", "echo " + "a-long-word " * 30 + "; exit 1", check=True)
    cli("start", "x", check=True)
    cli("done", "x")
    monkeypatch.setenv("COLUMNS", "70")
    shown = cli("runs", "x").out
    assert max(len(line) for line in shown.splitlines()) <= 70, shown
    monkeypatch.delenv("COLUMNS")
    assert max(len(line) for line in cli("runs", "x").out.splitlines()) > 70  # (200 by default)


def test_server_status_says_unused_only_where_use_is_tracked() -> None:
    from milepost.cli.runtime import status_text
    from milepost.flows.server import ServerInfo

    up = {"running": True, "healthy": True, "pid": 7, "ui_url": "http://127.0.0.1:1", "last_use": 1000.0}
    tracked = status_text(ServerInfo(**up, idle=1800.0), now=1040.0)
    assert "unused for 40 s" in tracked and "stops itself after" in tracked, tracked
    untracked = status_text(ServerInfo(**up), now=1657.0)  # (a last-use file left by an earlier server)
    assert "unused for" not in untracked and "its use is not tracked" in untracked, untracked


def test_item_list_does_not_ask_for_a_report_while_a_milestone_is_stale(cli: CLI) -> None:
    (cli.cwd / "src.txt").write_text("one\n")
    cli("item", "create", "stale", check=True)
    cli("add", "x", "--gate", "true", "--inputs", "src.txt", check=True)
    cli("start", "x", check=True)
    cli("done", "x", check=True)
    [before] = cli.json("item", "list")["items"]
    assert before["readiness_state"] == "awaiting_report", before
    (cli.cwd / "src.txt").write_text("two\n")
    [after] = cli.json("item", "list")["items"]
    assert after["readiness_state"] == "stale" and "re-prove" in after["readiness_reason"], after
    assert "complete it with a report" not in cli("item", "list").out
    assert cli.json("item", "show")["readiness_state"] == "stale"  # (item show said so already)


def test_junit_and_step_summary_mark_what_an_earlier_drive_proved_and_time_the_drive(
    cli: CLI, monkeypatch: pytest.MonkeyPatch
) -> None:
    import xml.etree.ElementTree as ET

    from milepost.present.report import junit_xml, step_summary
    from milepost.service import Service
    from milepost.service.drive import summarize

    cli("item", "create", "earlier", check=True)
    cli("add", "old", "--gate", "true", check=True)
    cli("add", "new", "--gate", "true", check=True)
    cli("start", "old", check=True)
    cli("done", "old", check=True)
    monkeypatch.chdir(cli.cwd)
    svc = Service.open()
    try:
        it, g = svc.graph(1, proofs=False)
        summary = summarize(svc, it, g, durations={"new": 1.25})  # this drive ran new, 1.25 s of gate time
        # Its wall time (began after old's run ended: Service.open and the summary take more than that).
        summary.duration = 0.001
        root = ET.fromstring(junit_xml(svc, summary).split("\n", 1)[1])
        assert root.get("time") == "0.001" and root.find("testsuite").get("time") == "0.001"  # type: ignore[union-attr]
        cases = {c.get("name"): c for c in root.iter("testcase")}
        props = {p.get("name"): p.get("value") for p in cases["old"].iter("property")}
        assert props["outcome"] == "proven_earlier" and props["proven_in_attempt"] == "1", props
        assert "proven in an earlier drive: attempt 1" in (cases["old"].findtext("system-out") or "")
        assert "outcome" not in {p.get("name") for p in cases["new"].iter("property")}
        table = step_summary(svc, summary)
        assert "| old | done | 1/3 | 1 | earlier (attempt 1) |" in table, table
    finally:
        svc.close()

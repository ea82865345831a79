"""A drive that ends not done says what failed (issue 42): each failed or
stuck milestone of its summary with its last attempt's reason, its gate's
last lines (as ``done`` shows them) and the path of its log; its JSON
``drive_finished`` carries the same."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import CLI

pytestmark = pytest.mark.xdist_group("prefect")

GATE = "echo compiling; echo 'error: x.c:3: missing semicolon' >&2; exit 3"


def _stuck(cli: CLI) -> None:
    cli("item", "create", "summary", check=True)
    cli("add", "x", "--gate", GATE, "--retries", "0", check=True)
    cli("add", "y", "--gate", "true", check=True)
    cli("start", "x", check=True)
    assert cli("done", "x").code == 1  # its one attempt spent: stuck
    cli("start", "y", check=True)
    cli("done", "y", check=True)


def test_a_drive_not_done_names_the_stuck_milestone_its_last_lines_and_its_log(prefect_api: str, cli: CLI) -> None:
    _stuck(cli)
    r = cli("drive")
    assert r.code == 1, r.err
    lines = r.out.splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("x: stuck — attempt 1: exit 3"))
    assert "error: x.c:3: missing semicolon" in "\n".join(lines[at : at + 12]), r.out
    log = next(line for line in lines[at:] if line.strip().startswith("log: ")).split("log: ", 1)[1]
    assert log.endswith("attempt-1.log") and Path(log).is_file(), log
    assert not any(line.startswith("y: ") for line in lines), r.out  # done: nothing to say


def test_the_json_drive_finished_carries_the_failure(prefect_api: str, cli: CLI) -> None:
    _stuck(cli)
    r = cli("--json", "drive")
    assert r.code == 1, r.err
    finished = [json.loads(line) for line in r.out.splitlines() if line.strip()][-1]
    assert finished["event"] == "drive_finished", finished
    by_name = {m["name"]: m for m in finished["milestones"]}
    failure = by_name["x"]["failure"]
    assert failure["attempt"] == 1 and failure["reason"] == "exit 3"
    assert "error: x.c:3: missing semicolon" in failure["last_lines"]
    assert failure["log"].endswith("attempt-1.log") and Path(failure["log"]).is_file()
    assert "failure" not in by_name["y"]  # (absent, not null, for a milestone that did not fail)

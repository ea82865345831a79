"""docs/doers.md's recipes for real agents, read from the page and run by
/bin/sh as the drive runs a doer, with stand-in ``claude``, ``codex`` and
``aider`` executables first on PATH (tests/agents/standin.py: the documented
output forms, no model, no network): the budget flag and the session to
resume go in only when milepost gives them, and milepost reads each one's
usage report. (tests/flows/test_agent_doers.py drives them.)"""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest

from milepost.gates.usage import Cost, read_usage
from tests.agents.standin import install

DOC = Path(__file__).parents[1] / "docs" / "doers.md"


def recipes() -> dict[str, str]:
    """The ``do:`` lines of the "Real agents" section, by agent."""
    section = DOC.read_text().split("## Real agents", 1)[1]
    return {m.group(1): m.group(2) for m in re.finditer(r"^- \*\*(.+?)\*\*: `do: (.+)`$", section, re.MULTILINE)}


def run_recipe(tmp_path: Path, agent: str, given: dict[str, str], scenario: dict[str, Any] | None = None) -> Any:
    """Run one recipe as a doer's command; its output, what the stand-in was given, and its cost as read."""
    bin_dir = install(tmp_path / "bin")
    prompt = tmp_path / "prompt.md"
    prompt.write_text("# Milestone 'a'\nDo the work.\n")
    (tmp_path / "scenario.json").write_text(json.dumps(scenario or {}))
    record, cost, log = tmp_path / "seen.jsonl", tmp_path / "attempt-1.cost.json", tmp_path / "attempt-1.do.log"
    for f in (record, cost, log):
        f.unlink(missing_ok=True)
    env = {
        "PATH": f"{bin_dir}:{os.environ['PATH']}",
        "MILEPOST_MILESTONE": "a",
        "MILEPOST_ATTEMPT": "1",
        "MILEPOST_PROMPT": str(prompt),
        "MILEPOST_COST_FILE": str(cost),
        "STANDIN_SCENARIO": str(tmp_path / "scenario.json"),
        "STANDIN_RECORD": str(record),
        **given,
    }
    with open(log, "w") as out:
        subprocess.run(["/bin/sh", "-c", recipes()[agent]], cwd=tmp_path, env=env, stdout=out, check=True, timeout=60)
    seen = json.loads(record.read_text().splitlines()[-1])
    return seen["argv"], read_usage(log, cost)


def test_the_page_has_the_recipes() -> None:
    assert set(recipes()) == {"Claude Code", "Claude Code, streamed", "Codex", "Aider"}


@pytest.mark.parametrize("agent", ["Claude Code", "Claude Code, streamed"])
def test_claude_code_is_capped_resumes_its_session_and_is_read(tmp_path: Path, agent: str) -> None:
    argv, cost = run_recipe(tmp_path, agent, {}, {"a": {"usd": 0.25, "session": "new-1"}})
    assert "--max-budget-usd" not in argv and "--resume" not in argv  # no budget, a first attempt
    assert argv[:2] == ["-p", "# Milestone 'a'\nDo the work."]
    assert cost == Cost(0.25, 12 + 340 + 1000 + 200, "new-1", "claude-json", None)
    given = {"MILEPOST_BUDGET_LEFT_USD": "1.5000", "MILEPOST_DOER_SESSION": "sess 1"}  # (a space: one argument)
    argv, cost = run_recipe(tmp_path, agent, given, {"a": {"usd": 0.25}})
    assert argv[argv.index("--max-budget-usd") + 1] == "1.5000"
    assert argv[argv.index("--resume") + 1] == "sess 1"
    assert cost.session == "sess 1" and cost.usd == 0.25


def test_codex_resumes_its_thread_and_its_events_give_tokens(tmp_path: Path) -> None:
    argv, cost = run_recipe(tmp_path, "Codex", {}, {"a": {"session": "th-1"}})
    assert argv[0] == "exec" and "resume" not in argv and "--json" in argv
    assert cost == Cost(None, 24763 + 122, "th-1", "codex-json", None)
    argv, cost = run_recipe(tmp_path, "Codex", {"MILEPOST_DOER_SESSION": "th-1"})
    assert argv[argv.index("resume") + 1] == "th-1" and argv[-1].startswith("# Milestone")
    assert cost.session == "th-1" and cost.tokens == 2 * (24763 + 122)  # the thread's total (its growth: stored)


def test_aider_writes_its_analytics_log_where_milepost_reads_it(tmp_path: Path) -> None:
    argv, cost = run_recipe(tmp_path, "Aider", {"MILEPOST_DOER_SESSION": "ignored"}, {"a": {"usd": 0.02}})
    assert "--no-analytics" in argv
    assert cost == Cost(0.02, 4213 + 312, None, "file", None)

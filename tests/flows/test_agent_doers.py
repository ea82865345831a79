"""Real agents as doers, without a wrapper (docs/doers.md, "Real agents"):
drives whose doers are docs/doers.md's recipes, run with stand-in ``claude``,
``codex`` and ``aider`` executables first on PATH (tests/agents/standin.py:
the documented output forms, no model, no network). Each doer is charged
what its own report says, gets what is left of its budget, is stopped past
it when it streams its cost, and resumes its milestone's session on a retry."""

from __future__ import annotations

import json
import os
import time
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest

from milepost.flows.artifacts import do_rows
from milepost.flows.drive import run_drive
from milepost.graph import MilestoneStatus
from milepost.service import Service
from milepost.service._find import milestone_pk
from milepost.service.do_evidence import do_runs, session_of
from tests.agents.standin import install
from tests.conftest import CLI, InProcessCLI
from tests.flows.conftest import api_post
from tests.flows.test_doers import _gone, _props, any_service, apply, repo
from tests.test_agent_recipes import recipes

pytestmark = pytest.mark.xdist_group("prefect")
__all__ = ["any_service"]  # (a fixture of test_doers.py, used here)

S = MilestoneStatus


class Agents:
    """The stand-ins on PATH, their scenario, and what each run was given."""

    def __init__(self, tmp: Path, monkeypatch: pytest.MonkeyPatch, scenario: dict[str, Any]) -> None:
        self.bin = install(tmp / "bin")
        self.scenario, self.record = tmp / "scenario.json", tmp / "seen.jsonl"
        self.scenario.write_text(json.dumps(scenario))
        self.env = {
            "PATH": f"{self.bin}:{os.environ['PATH']}",
            "STANDIN_SCENARIO": str(self.scenario),
            "STANDIN_RECORD": str(self.record),
        }
        for k, v in self.env.items():
            monkeypatch.setenv(k, v)

    def seen(self) -> dict[str, dict[str, Any]]:
        lines = self.record.read_text().splitlines() if self.record.exists() else []
        return {s["key"]: s for s in map(json.loads, lines)}


def recipe(agent: str) -> str:
    """A recipe as a YAML single-quoted scalar."""
    return "'" + recipes()[agent].replace("'", "''") + "'"


def test_claude_codes_json_results_are_charged_resumed_and_stop_at_the_items_budget(
    prefect_api: str, any_service: Service, workspace: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On SQLite and on PostgreSQL."""
    service = any_service
    repo(workspace)
    agents = Agents(
        tmp_path,
        monkeypatch,
        {
            "a#1": {"write": {"src/a.py": "VALUE = 1\n"}, "usd": 0.3, "session": "sess-a"},
            "a#2": {"write": {"src/a.py": "VALUE = 2\n"}, "usd": 0.3},
            "b": {"write": {"src/b.py": "B = 1\n"}, "usd": 0.4, "session": "sess-b"},
            "c": {"write": {"src/c.py": "C = 1\n"}, "usd": 0.1},
        },
    )
    item = apply(
        service,
        f"""objective: agents
doer: {{budget_usd: 1.0}}
milestones:
  - {{name: a, retries: 2, do: {recipe("Claude Code")}, gate: 'grep -q "VALUE = 2" src/a.py'}}
  - {{name: b, deps: [a], do: {recipe("Claude Code")}, gate: 'true'}}
  - {{name: c, deps: [b], retries: 3, do: {recipe("Claude Code")}, gate: 'true'}}
""",
    )
    summary = run_drive(service, item)
    assert not summary.ok
    assert {m.name: m.status for m in service.get_item(item).milestones} == {"a": S.DONE, "b": S.DONE, "c": S.STUCK}
    a_runs = do_runs(service.ctx, "a", item)
    assert [(r.attempt, r.cost_usd, r.tokens, r.session) for r in a_runs] == [
        (1, 0.3, 1552, "sess-a"),
        (2, 0.3, 1552, "sess-a"),
    ]
    seen = agents.seen()
    # the first attempt starts a session with the whole budget; the retry resumes it with what is left
    first, retry = seen["a#1"]["argv"], seen["a#2"]["argv"]
    assert "--resume" not in first and first[first.index("--max-budget-usd") + 1] == "1.0000"
    assert retry[retry.index("--resume") + 1] == "sess-a" and retry[retry.index("--max-budget-usd") + 1] == "0.7000"
    assert seen["a#2"]["env"]["MILEPOST_DOER_SESSION"] == "sess-a" and "MILEPOST_DOER_SESSION" not in seen["a#1"]["env"]
    assert "--resume" not in seen["b#1"]["argv"]  # another milestone, another session
    # spent: $1.00 of $1.00: c is stuck at once, its doer never started
    why = "budget: the item's doers cost $1.00 of doer.budget_usd $1.00"
    assert [(r.attempt, r.reason) for r in service.runs("c", item)] == [(1, why)]
    assert "c#1" not in seen and do_runs(service.ctx, "c", item) == []
    # `runs` shows each do run's cost, tokens and session
    cli = InProcessCLI(workspace, {"MILEPOST_DB": service.ctx.store.url})
    out = cli("runs", "a", "--item", str(item), check=True).out
    assert "$0.30" in out and "1552" in out and "sess-a" in out
    shown = json.loads(cli("--json", "runs", "a", "--item", str(item), check=True).out)
    assert [(d["cost_usd"], d["tokens"], d["session"]) for d in shown["do_runs"]][1] == (0.3, 1552, "sess-a")
    # the Prefect UI: the drive's table of do runs
    of_run = {"artifacts": {"flow_run_id": {"any_": [summary.flow_run_id]}}}
    table = next(
        a for a in api_post(prefect_api, "/artifacts/filter", of_run) if a["key"] == f"milepost-item-{item}-do-runs"
    )
    rows = json.loads(table["data"]) if isinstance(table["data"], str) else table["data"]
    assert [(r["milestone"], r["attempt"], r["cost_usd"], r["tokens"], r["session"]) for r in rows] == [
        ("a", 1, 0.3, 1552, "sess-a"),
        ("a", 2, 0.3, 1552, "sess-a"),
        ("b", 1, 0.4, 1552, "sess-b"),
    ]


def test_a_streamed_run_past_its_budget_is_stopped_mid_run(
    prefect_api: str, service: Service, workspace: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The documented recipe's form (one prompt): Claude Code prints its cost
    only in its result line at the end; its assistant lines' token counts,
    priced (milepost.gates.prices), are what stops it before then."""
    repo(workspace)
    # three API calls of Opus 4.1 ($75 per million output tokens): $0.30, $0.60, $0.90 so far; its result never comes
    turn = {"input": 0, "output": 4000, "cache_read": 0, "cache_creation": 0}
    step = {"write": {"src/a.py": "A = 1\n"}, "model": "claude-opus-4-1-20250805", "turns": [turn] * 3, "gap": 2.0}
    agents = Agents(tmp_path, monkeypatch, {"a": step | {"before_result": 120, "usd": 0.95}})
    item = apply(
        service,
        f"""objective: a streamed doer
milestones:
  - {{name: a, retries: 2, do_budget_usd: 0.5, do: {recipe("Claude Code, streamed")}, gate: 'true'}}
""",
    )
    t0 = time.monotonic()
    summary = run_drive(service, item)
    assert time.monotonic() - t0 < 90 and not summary.ok
    assert service.get_item(item).milestones[0].status is S.STUCK
    (run,) = do_runs(service.ctx, "a", item)
    why = "budget: its doer's estimated cost $0.60 passed the $0.50 left of its budget"
    assert (run.outcome, run.reason, run.session) == ("failed", why, "claude-session-a#1")
    assert run.cost_usd == pytest.approx(0.6) and run.tokens == 8000  # charged the estimate, said as such
    assert run.usage_warning is not None and "its cost is milepost's estimate" in run.usage_warning
    assert run.duration < 60
    assert _gone(agents.seen()["a#1"]["pid"])  # its process group was stopped
    # the attempt fails with the reason budget; no second doer starts (the milestone's budget is spent)
    reasons = [r.reason for r in service.runs("a", item)]
    assert reasons[0] == why and reasons[1].startswith("budget: a's doers cost $0.60 of do_budget_usd $0.50")
    assert "a#2" not in agents.seen()
    # its session is kept with the milestone until a reset forgets it (the next doer starts a new one)
    with service.ctx.store.read() as conn:
        a_pk = milestone_pk(conn, item, "a")
    assert session_of(service.ctx, a_pk) == "claude-session-a#1"
    InProcessCLI(workspace)("reset", "a", "--item", str(item), "--reason", "budget raised", check=True)
    assert session_of(service.ctx, a_pk) is None


def test_claude_code_stopped_at_its_own_cap_fails_with_the_reason_budget(
    prefect_api: str, service: Service, workspace: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The recipe caps Claude Code with ``--max-budget-usd``; a Claude Code that
    stops there (``error_max_budget_usd``, exit 1) is a budget stop, said as
    such, not a plain ``do exit 1``."""
    repo(workspace)
    agents = Agents(tmp_path, monkeypatch, {"a": {"write": {"src/a.py": "A = 1\n"}, "usd": 0.52, "capped": True}})
    item = apply(
        service,
        f"""objective: a capped doer
milestones:
  - {{name: a, retries: 1, do_budget_usd: 0.5, do: {recipe("Claude Code")}, gate: 'true'}}
""",
    )
    assert not run_drive(service, item).ok
    assert agents.seen()["a#1"]["argv"][agents.seen()["a#1"]["argv"].index("--max-budget-usd") + 1] == "0.5000"
    (run,) = do_runs(service.ctx, "a", item)
    why = "budget: its doer stopped at its own spending cap (Claude Code's error_max_budget_usd): $0.52 spent"
    assert (run.outcome, run.reason, run.cost_usd) == ("failed", why, 0.52)
    reasons = [r.reason for r in service.runs("a", item)]
    assert reasons[0] == why and reasons[1].startswith("budget: a's doers cost $0.52 of do_budget_usd $0.50")


def test_codex_and_aider_recipes_and_an_unreadable_report(
    prefect_api: str, service: Service, workspace: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Codex's events give tokens and its thread (resumed by the retry);
    aider's analytics log, pointed at the cost file, gives dollars; a named
    form the output does not hold is a warning in the do run. Shown in
    ``runs``, JUnit, the step summary and the UI's do-runs table."""
    repo(workspace)
    agents = Agents(
        tmp_path,
        monkeypatch,
        {
            "cx#1": {"write": {"src/cx.py": "X = 1\n"}, "session": "th-9"},
            "cx#2": {"write": {"src/cx.py": "X = 2\n"}},
            "ai": {"write": {"src/ai.py": "A = 1\n"}, "usd": 0.02},
            "bad": {"write": {"src/bad.py": "B = 1\n"}, "raw": "I did it, trust me."},
        },
    )
    item = apply(
        service,
        f"""objective: other agents
milestones:
  - {{name: cx, retries: 1, do: {recipe("Codex")}, gate: 'grep -q "X = 2" src/cx.py'}}
  - {{name: ai, do: {recipe("Aider")}, gate: 'true'}}
  - {{name: bad, do_usage: claude-json, do: {recipe("Claude Code")}, gate: 'true'}}
""",
    )
    junit, step = tmp_path / "report.xml", tmp_path / "step.md"
    r = CLI(workspace, agents.env)("drive", str(item), "--junit", str(junit), GITHUB_STEP_SUMMARY=str(step))
    assert r.code == 0, r.out + r.err
    assert "warning: bad: its doer's usage report was not read: no Claude Code report" in r.out + r.err
    assert "do     ai (attempt 1 in " in r.out and ", $0.02, 4525 tokens): exit 0" in r.out
    cx = do_runs(service.ctx, "cx", item)
    assert [(d.tokens, d.session, d.cost_usd) for d in cx] == [(24885, "th-9", None), (24885, "th-9", None)]
    assert agents.seen()["cx#2"]["argv"][:5] == ["exec", "--full-auto", "--json", "resume", "th-9"]
    (ai,) = do_runs(service.ctx, "ai", item)
    assert (ai.cost_usd, ai.tokens, ai.session, ai.usage_warning) == (0.02, 4525, None, None)
    (bad,) = do_runs(service.ctx, "bad", item)
    assert bad.outcome == "passed" and bad.cost_usd is None  # not a silent zero
    assert bad.usage_warning == "no Claude Code report in its output (claude -p --output-format json)"
    out = InProcessCLI(workspace)("runs", "bad", "--item", str(item), check=True).out
    assert "its usage report was not read: no Claude Code report" in out
    # JUnit and the step summary: each do run's cost, tokens and session
    cases = {c.get("name"): c for c in ET.parse(junit).getroot().iter("testcase")}
    p = _props(cases["cx"])
    assert (p["do_tokens"], p["do_tokens_total"], p["do_session"], p["do_cost_usd"]) == ("24885", "49770", "th-9", "")
    assert _props(cases["bad"])["do_usage_warning"].startswith("no Claude Code report")
    md = step.read_text()
    assert "| passed (attempt 2, 24885 tokens, session `th-9`) |" in md
    assert "| passed (attempt 1, $0.02, 4525 tokens) |" in md
    # the UI's table of do runs
    rows = do_rows([*cx, ai])
    assert rows[1] | {"reason": ""} == {
        "milestone": "cx",
        "attempt": 2,
        "outcome": "passed",
        "cost_usd": None,
        "tokens": 24885,
        "session": "th-9",
        "reason": "",
        "usage_warning": "",
    }

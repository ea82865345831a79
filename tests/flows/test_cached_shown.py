"""A cached attempt (a passed run on the same gate and inputs stands in;
nothing runs) is said where people look: the progress lines, the summary
(a count and the row), ``--json`` events, the JUnit report and GitHub's step
summary, and the Prefect task run's state (Prefect's own ``Cached``). Real
drives (the CLI in its own process) on a real Prefect server, on SQLite and
PostgreSQL; every gate appends to a ledger, so the test counts real runs."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from junitparser import JUnitXml

from milepost.events import DriveEvent
from milepost.service import Service
from tests.conftest import CLI, Postgres
from tests.flows.conftest import api_post
from tests.recording import RecordingReporter

pytestmark = pytest.mark.xdist_group("prefect")

PLAN = """objective: {objective}
milestones:
  - name: lint
    inputs: [src/a.py]
    gate: 'echo lint >> ran.txt; test -s src/a.py'
"""


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def store_cli(request: pytest.FixtureRequest, workspace: Path, tmp_path: Path) -> CLI:
    env = {}
    if request.param == "postgresql":
        pg: Postgres = request.getfixturevalue("postgres")
        env["MILEPOST_DB"] = pg.create_db(f"mp_cached_{abs(hash(tmp_path)) % 10**8}")
    cli = CLI(workspace, env)
    cli("init", check=True)
    return cli


def new_item(cli: CLI, ws: Path, objective: str) -> int:
    (ws / "plan.yaml").write_text(PLAN.format(objective=objective))
    return int(cli.json("plan", "apply", "plan.yaml")["id"])


def props(case: object) -> dict[str, str]:
    return {p.get("name"): p.get("value") for p in case._elem.iter("property")}  # type: ignore[attr-defined]


@pytest.mark.timeout(400)
def test_a_cached_attempt_is_named_with_the_run_it_reused_everywhere(
    prefect_api: str, store_cli: CLI, workspace: Path
) -> None:
    cli = store_cli
    (workspace / "src").mkdir()
    (workspace / "src/a.py").write_text("x = 1\n")
    first = new_item(cli, workspace, "first")
    r = cli("drive", str(first), "--junit", "first.xml")
    assert r.code == 0, r.err + r.out
    assert (workspace / "ran.txt").read_text().split() == ["lint"]
    assert "done   lint (attempt 1 in " in r.out and "cached" not in r.out  # a real run reads as one
    case = next(iter(next(iter(JUnitXml.fromfile(str(workspace / "first.xml"))))))
    assert "outcome" not in props(case) and case.system_out is None

    # The same gate on the same inputs in a second item: nothing runs, a plain-lines drive says so.
    second = new_item(cli, workspace, "second")
    step = workspace / "step-summary.md"
    r = cli("drive", str(second), "--junit", "second.xml", GITHUB_STEP_SUMMARY=str(step))
    assert r.code == 0, r.err + r.out
    assert (workspace / "ran.txt").read_text().split() == ["lint"]  # not run again
    assert f"done   lint (attempt 1, cached from item {first} 'lint' attempt 1)" in r.out
    assert " in 0.0 s" not in r.out
    row = next(ln for ln in r.out.splitlines() if ln.split()[:2] == ["1", "lint"])
    assert row.split()[5] == "cached" and row.endswith(f"cached from item {first} 'lint' attempt 1")
    assert "(0 gate runs, 1 cached, " in r.out
    # JUnit: passed, and names the run reused (item, milestone, attempt).
    suite = next(iter(JUnitXml.fromfile(str(workspace / "second.xml"))))
    case = next(iter(suite))
    assert case.is_passed and case.name == "lint"
    assert {k: v for k, v in props(case).items() if k.startswith(("outcome", "cached"))} == {
        "outcome": "cached",
        "cached_from_item": str(first),
        "cached_from_milestone": "lint",
        "cached_from_attempt": "1",
    }
    assert (
        case.system_out == f"cached: not run; the passed run of item {first} 'lint' attempt 1 on the same gate"
        " and inputs stood in"
    )
    assert props(suite)["cached"] == "1" and props(suite)["gate_runs"] == "0"
    text = step.read_text()
    assert "(0 gate runs, 1 cached, " in text
    assert f"| cached | 0.0 s | cached from item {first} 'lint' attempt 1 |" in text

    # --json: the event and the summary carry the run reused; the task run's state is Prefect's Cached.
    third = new_item(cli, workspace, "third")
    r = cli("--json", "drive", str(third), "--wait-recorded")
    assert r.code == 0, r.err
    events = [json.loads(ln) for ln in r.out.splitlines()]
    finished = next(e for e in events if e["event"] == "gate_finished")
    source = {"item": first, "milestone": "lint", "attempt": 1}
    assert finished["outcome"] == "cached" and finished["cached_from"] == source
    summary = events[-1]
    assert summary["event"] == "drive_finished" and (summary["gate_runs"], summary["cached"]) == (0, 1)
    assert summary["milestones"][0]["cached_from"] == source
    runs = api_post(prefect_api, "/task_runs/filter", {"flow_runs": {"id": {"any_": [summary["flow_run_id"]]}}})
    assert [(t["name"], t["state"]["type"], t["state"]["name"]) for t in runs] == [("lint", "COMPLETED", "Cached")]
    assert f"cached: passed as item {first} 'lint' attempt 1" in runs[0]["state"]["message"]
    # The flow run's artifacts: the count in the summary, the run reused in the milestone table.
    of_run = {"artifacts": {"flow_run_id": {"any_": [summary["flow_run_id"]]}}}
    arts = api_post(prefect_api, "/artifacts/filter", of_run)
    by_type = {a["type"]: a["data"] for a in arts}
    assert "0 gate runs, 1 cached in this drive." in by_type["markdown"]
    table = json.loads(by_type["table"]) if isinstance(by_type["table"], str) else by_type["table"]
    assert table[0]["last_reason"] == f"cached from item {first} 'lint' attempt 1"
    assert (workspace / "ran.txt").read_text().split() == ["lint"]


@pytest.mark.timeout(400)
def test_a_cached_gate_is_drawn_not_run_as_a_task_and_its_dependent_waits_on_it(
    prefect_api: str, service: Service, workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A cached result that stands in for a gate gets its task run drawn in its final state (Cached), not run
    through Prefect's task engine (a task that only read the result back cost about as much as a `true`
    gate: docs/benchmarks.md); the dependent's task run still waits on it, so the UI shows the same DAG."""
    from milepost.flows.drive import run_drive
    from milepost.flows.gate_task import GATE_TASKS, TaskKind
    from milepost.planfile import parse_plan

    (workspace / "src").mkdir()
    (workspace / "src/a.py").write_text("x = 1\n")
    plan = PLAN + "  - name: ship\n    deps: [lint]\n    gate: 'echo ship >> ran.txt'\n"
    first = service.apply_plan(parse_plan(plan.format(objective="first"))).id
    assert run_drive(service, first, max_parallel=2).ok
    second = service.apply_plan(parse_plan(plan.format(objective="second"))).id
    real, submitted = GATE_TASKS[TaskKind.GATE], []

    class Counted:
        task_key = real.task_key

        def submit(self, box: Any, **kwargs: Any) -> Any:
            submitted.append(box.spec.claim.milestone.name)
            return real.submit(box, **kwargs)

    monkeypatch.setitem(GATE_TASKS, TaskKind.GATE, Counted())
    summary = run_drive(service, second, max_parallel=2, wait_recorded=True)
    assert summary.ok and (summary.gate_runs, summary.cached) == (1, 1), summary
    assert submitted == ["ship"]  # lint's cached result stood in: no task run through the engine
    assert (workspace / "ran.txt").read_text().split() == ["lint", "ship", "ship"]
    runs = api_post(prefect_api, "/task_runs/filter", {"flow_runs": {"id": {"any_": [summary.flow_run_id]}}})
    by_name = {t["name"]: t for t in runs}
    assert len(runs) == 2 and sorted(by_name) == ["lint", "ship"] and len({t["task_key"] for t in runs}) == 1
    assert (by_name["lint"]["state"]["type"], by_name["lint"]["state"]["name"]) == ("COMPLETED", "Cached")
    assert f"cached: passed as item {first} 'lint' attempt 1" in by_name["lint"]["state"]["message"]
    assert [i["id"] for i in by_name["ship"]["task_inputs"]["wait_for"]] == [by_name["lint"]["id"]]

    # Its task run cannot be drawn: said once, the drive goes on, and lint is not drawn as another driver's.
    from milepost.flows import plan_nodes

    def refused(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("the events client is closed")

    third = service.apply_plan(parse_plan(plan.format(objective="third"))).id
    monkeypatch.setattr(plan_nodes, "ran_node", refused)
    reporter = RecordingReporter()
    summary = run_drive(service, third, max_parallel=2, wait_recorded=True, reporter=reporter)
    assert summary.ok and (summary.gate_runs, summary.cached) == (1, 1), summary
    warnings = [data for event, data in reporter.events if event is DriveEvent.WARNING]
    assert len(warnings) == 1 and "could not draw lint's task run" in warnings[0], warnings
    assert "its cached pass stands in" in warnings[0]
    runs = api_post(prefect_api, "/task_runs/filter", {"flow_runs": {"id": {"any_": [summary.flow_run_id]}}})
    assert [t["state"]["name"] for t in runs if t["name"] == "lint"] != ["Done elsewhere"], runs

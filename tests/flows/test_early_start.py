"""A drive's first gate starts before Prefect is imported (flows/early.py):
the gate runs while Prefect loads, the loop adopts it (one run, one task
run), an interrupt while Prefect loads stops it with no budget spent, and a
drive whose flow run never starts still records the gate's verdict."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from milepost.events import DriveEvent
from milepost.flows.early import EarlyStart
from milepost.planfile import parse_plan
from milepost.service import Service
from tests.conftest import CLI, wait_until
from tests.flows.conftest import api_post, run_script
from tests.recording import RecordingReporter

pytestmark = pytest.mark.xdist_group("prefect")

STAMP = (
    'python3 -c \'import os, time; open("started-" + os.environ["MILEPOST_ATTEMPT"], "w").write(repr(time.time()))\''
)


EARLY_ALONE = textwrap.dedent(
    """
    import json, sys, time
    from pathlib import Path
    from milepost.service import Service
    from milepost.flows.early import start_first_gates

    svc = Service.open()
    early = start_first_gates(svc, 1, max_parallel=int(sys.argv[1]))
    deadline = time.monotonic() + 60
    while not all(Path(name).exists() for name in sys.argv[2:]):
        assert time.monotonic() < deadline
        time.sleep(0.02)
    prefect = any(m == "prefect" or m.startswith("prefect.") for m in sys.modules)
    early.settle(interrupt=False)
    print(json.dumps({"prefect": prefect, "owner": early.session.owner,
                      "claimed": [c.milestone.name for c in early.claims],
                      "gates": [g.claim.milestone.name for g in early.gates],
                      "recorded": [g.claim.milestone.name for g in early.gates if g.recorded is not None]}))
    """
)


def early_alone(cli: CLI, workspace: Path, max_parallel: int, *files: str) -> dict[str, Any]:
    """The steps before the flow run alone in a process (no loop takes them
    over): once ``files`` exist, what it claimed, started and recorded, settled."""
    out: dict[str, Any] = run_script(cli, workspace, EARLY_ALONE, str(max_parallel), *files, timeout=120)
    return out


def test_the_first_gate_runs_before_prefect_is_imported(cli: CLI, workspace: Path) -> None:
    """The steps before the flow run, alone in a process: the gate starts, Prefect is
    not imported, and when no loop takes the gate over its verdict is still recorded."""
    cli("item", "create", "early", check=True)
    cli("add", "first", "--gate", f"{STAMP}; sleep 0.5", check=True)
    cli("add", "second", "--deps", "first", "--gate", "true", check=True)
    out = early_alone(cli, workspace, 1, "started-1")
    assert out["prefect"] is False and out["claimed"] == ["first"] and out["owner"].startswith("drive:")
    ms = {m["name"]: m for m in cli.json("list")["milestones"]}
    assert ms["first"]["status"] == "done" and ms["first"]["attempts"] == 1, ms
    assert ms["second"]["status"] == "pending" and ms["second"]["view"] == "ready", ms
    [run] = cli.json("runs", "first")["runs"]
    assert run["outcome"] == "passed" and run["duration"] >= 0.5, run


def test_a_drive_adopts_its_early_gate(cli: CLI, workspace: Path, prefect_api: str) -> None:
    """The whole drive: the first gate ran once, before the flow run began, and is the
    flow run's task run (named after it, Completed), like the gates after it."""
    cli("item", "create", "early", check=True)
    cli("add", "first", "--gate", STAMP, check=True)
    cli("add", "second", "--deps", "first", "--gate", "true", check=True)
    t0 = time.time()
    r = cli("--json", "drive", timeout=240)
    assert r.code == 0, r.err + r.out
    events = [json.loads(line) for line in r.out.splitlines()]
    kinds = [e["event"] for e in events]
    assert kinds[0] == "drive_started" and kinds.count("gate_started") == 2, kinds
    started = next(e for e in events if e["event"] == "drive_started")
    assert float((workspace / "started-1").read_text()) >= t0
    # Its gate_started tells when its command started, before the flow run (and its report) began.
    first = next(e for e in events if e["event"] == "gate_started" and e["milestone"] == "first")
    at = datetime.fromisoformat(first["at"]).timestamp()
    assert t0 <= at <= float((workspace / "started-1").read_text()), (t0, first)
    # The opening is stamped with the drive's start, before its first gate's; every stamp in time order (issue 42).
    assert t0 <= datetime.fromisoformat(started["at"]).timestamp() <= at, (first, started)
    stamps = [datetime.fromisoformat(e["at"]) for e in events]
    assert stamps == sorted(stamps), events
    ended = next(e for e in events if e["event"] == "gate_finished" and e["milestone"] == "first")
    [run] = cli.json("runs", "first")["runs"]
    ran_until = datetime.fromisoformat(run["finished_at"]).timestamp()
    assert at <= datetime.fromisoformat(ended["at"]).timestamp() == pytest.approx(ran_until, abs=0.01), (ended, run)
    assert cli.json("runs", "first")["runs"][0]["outcome"] == "passed"
    assert len(cli.json("runs", "first")["runs"]) == 1
    flow_run_id = started["flow_run_id"]
    runs: list[dict[str, Any]] = api_post(
        prefect_api, "/task_runs/filter", {"flow_runs": {"id": {"any_": [flow_run_id]}}}
    )
    by_name = {t["name"]: t for t in runs}
    assert by_name["first"]["state"]["type"] == "COMPLETED", by_name["first"]["state"]
    assert by_name["second"]["state"]["type"] == "COMPLETED"


NAMED_STAMP = (
    'python3 -c \'import os, time; open("started-" + os.environ["MILEPOST_MILESTONE"], "w").write(repr(time.time()))\''
)


def test_as_many_first_gates_start_as_may_run_at_once(cli: CLI, workspace: Path) -> None:
    """With --max-parallel 2, the two ready milestones' gates both start before
    Prefect is imported (not their dependent); not taken over, both verdicts are
    recorded, and the dependent is ready."""
    cli("item", "create", "early", check=True)
    for name in ("one", "two", "three"):
        cli("add", name, "--gate", f"{NAMED_STAMP}; sleep 0.5", check=True)
    cli("add", "after", "--deps", "one,two", "--gate", NAMED_STAMP, check=True)
    out = early_alone(cli, workspace, 2, "started-one", "started-two")
    assert out["prefect"] is False and out["claimed"] == out["gates"] == ["one", "two"] and out["recorded"] == []
    assert not (workspace / "started-three").exists() and not (workspace / "started-after").exists()
    ms = {m["name"]: m for m in cli.json("list")["milestones"]}
    assert [ms[n]["status"] for n in ("one", "two", "three", "after")] == ["done", "done", "pending", "pending"], ms
    assert ms["after"]["view"] == "ready" and ms["one"]["attempts"] == ms["two"]["attempts"] == 1, ms


def test_a_drive_of_two_at_once_adopts_both_early_gates(cli: CLI, workspace: Path, prefect_api: str) -> None:
    """The whole drive with --max-parallel 2: both first gates started before the
    flow run did, each ran once and is its own Completed task run, and their
    dependent followed them."""
    cli("item", "create", "early", check=True)
    cli("add", "one", "--gate", f"{NAMED_STAMP}; sleep 1", check=True)
    cli("add", "two", "--gate", f"{NAMED_STAMP}; sleep 1", check=True)
    cli("add", "after", "--deps", "one,two", "--gate", NAMED_STAMP, check=True)
    r = cli("--json", "drive", "--max-parallel", "2", timeout=240)
    assert r.code == 0, r.err + r.out
    events = [json.loads(line) for line in r.out.splitlines()]
    flow_run_id = next(e for e in events if e["event"] == "drive_started")["flow_run_id"]
    [flow_run] = api_post(prefect_api, "/flow_runs/filter", {"flow_runs": {"id": {"any_": [flow_run_id]}}})
    began = datetime.fromisoformat(flow_run["start_time"]).timestamp()
    started = {n: float((workspace / f"started-{n}").read_text()) for n in ("one", "two", "after")}
    assert started["one"] < began and started["two"] < began, (started, began)
    assert started["after"] > max(started["one"], started["two"]) + 1
    for name in ("one", "two", "after"):
        assert [run["outcome"] for run in cli.json("runs", name)["runs"]] == ["passed"], name
    runs = api_post(prefect_api, "/task_runs/filter", {"flow_runs": {"id": {"any_": [flow_run_id]}}})
    assert sorted((t["name"], t["state"]["type"]) for t in runs) == [
        ("after", "COMPLETED"),
        ("one", "COMPLETED"),
        ("two", "COMPLETED"),
    ]


def test_a_first_gate_that_passes_early_chains_the_next(cli: CLI, workspace: Path) -> None:
    """A first gate that passes before any loop takes it over is recorded, and
    its dependent is claimed and started at once, in the same way, with the
    store alone (no Prefect): a chain does not wait for the flow run."""
    cli("item", "create", "early", check=True)
    cli("add", "one", "--gate", NAMED_STAMP, check=True)
    cli("add", "two", "--deps", "one", "--gate", NAMED_STAMP, check=True)
    cli("add", "three", "--deps", "two", "--gate", f"{NAMED_STAMP}; sleep 0.5", check=True)
    out = early_alone(cli, workspace, 1, "started-three")
    assert (out["prefect"], out["claimed"], out["recorded"]) == (False, ["one", "two", "three"], ["one", "two"]), out
    for name in ("one", "two", "three"):
        assert [run["outcome"] for run in cli.json("runs", name)["runs"]] == ["passed"], name
    assert {m["status"] for m in cli.json("list")["milestones"]} == {"done"}


def test_a_drive_adopts_gates_recorded_before_its_flow_run(cli: CLI, workspace: Path, prefect_api: str) -> None:
    """The whole drive: the first gates of a chain pass and are recorded while
    Prefect loads, the next starts before the flow run does; each gate ran once,
    each is its own Completed task run, and the drive tells of all three. A
    gate recorded before the flow run began is drawn as a task run made in its
    final state: with its own start and end, its output in its log, keyed and
    named as the gate task's runs."""
    cli("item", "create", "early", check=True)
    cli("add", "one", "--gate", NAMED_STAMP, check=True)
    cli("add", "two", "--deps", "one", "--gate", NAMED_STAMP + " && echo said-by-two", check=True)
    cli("add", "three", "--deps", "two", "--gate", NAMED_STAMP, check=True)
    r = cli("--json", "drive", timeout=240)
    assert r.code == 0, r.err + r.out
    events = [json.loads(line) for line in r.out.splitlines()]
    flow_run_id = next(e for e in events if e["event"] == "drive_started")["flow_run_id"]
    assert [e["milestone"] for e in events if e["event"] == "gate_finished"] == ["one", "two", "three"]
    assert next(e for e in events if e["event"] == "drive_finished")["gate_runs"] == 3
    [flow_run] = api_post(prefect_api, "/flow_runs/filter", {"flow_runs": {"id": {"any_": [flow_run_id]}}})
    began = datetime.fromisoformat(flow_run["start_time"]).timestamp()
    started = {n: float((workspace / f"started-{n}").read_text()) for n in ("one", "two", "three")}
    assert started["two"] < began, (started, began)
    for name in ("one", "two", "three"):
        assert [run["outcome"] for run in cli.json("runs", name)["runs"]] == ["passed"], name
    runs = api_post(prefect_api, "/task_runs/filter", {"flow_runs": {"id": {"any_": [flow_run_id]}}})
    assert sorted((t["name"], t["state"]["type"]) for t in runs) == [
        ("one", "COMPLETED"),
        ("three", "COMPLETED"),
        ("two", "COMPLETED"),
    ]
    name_of = {t["id"]: t["name"] for t in runs}
    edges = {t["name"]: [name_of.get(i["id"]) for i in t["task_inputs"].get("wait_for", [])] for t in runs}
    assert edges == {"one": [], "two": ["one"], "three": ["two"]}, edges  # the DAG in the UI, as for any drive
    by_name = {t["name"]: t for t in runs}
    assert len({t["task_key"] for t in runs}) == 1  # one task, as for any drive's gates
    for name in ("one", "two", "three"):
        run = by_name[name]
        assert run["state"]["name"] == "Completed" and f"gate of '{name}' (attempt 1)" in run["state"]["message"]
    one_start, one_end = (datetime.fromisoformat(by_name["one"][k]).timestamp() for k in ("start_time", "end_time"))
    assert abs(one_start - started["one"]) < 1 and one_end < began  # the gate's own times, before the flow run
    logs = api_post(prefect_api, "/logs/filter", {"logs": {"task_run_id": {"any_": [by_name["two"]["id"]]}}})
    assert "said-by-two" in [log["message"] for log in logs], logs


def test_an_interrupt_while_prefect_loads_stops_the_early_gate(cli: CLI, workspace: Path, prefect_api: str) -> None:
    """The gate itself sends SIGINT to the driver as it starts (while the driver
    still imports Prefect): exit 130, the gate's process gone, the milestone ready
    again with no attempt spent."""
    pidfile, gatepid = workspace / "driver.pid", workspace / "gate.pid"
    gate = f"echo $$ > {gatepid}; kill -INT $(cat {pidfile}); sleep 60"
    cli("item", "create", "early", check=True)
    cli("add", "first", "--gate", gate, "--retries", "0", check=True)
    p = subprocess.Popen(
        ["sh", "-c", f"echo $$ > {pidfile}; exec {sys.executable} -m milepost drive"],
        cwd=workspace,
        env=cli.env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    out, err = p.communicate(timeout=120)
    assert p.returncode == 130, (p.returncode, out, err)
    assert "Traceback" not in err, err
    pid = int(gatepid.read_text())
    wait_until(lambda: not os.path.exists(f"/proc/{pid}") or _zombie(pid), timeout=5)
    [m] = cli.json("list")["milestones"]
    assert m["status"] == "pending" and m["view"] == "ready" and m["attempts"] == 0, m
    [run] = cli.json("runs", "first")["runs"]
    assert run["outcome"] == "interrupted", run


def _zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] in ("Z", "X")
    except OSError:
        return True


def recorded_early(service: Service, plan: str, max_parallel: int, recorded: int) -> tuple[int, EarlyStart]:
    """``plan`` applied and its first gates started before any flow run, as
    the CLI's drive does, once ``recorded`` of them have passed and been recorded."""
    from milepost.flows.early import start_first_gates

    item = service.apply_plan(parse_plan(plan)).id
    early = start_first_gates(service, item, max_parallel=max_parallel)
    assert early is not None
    wait_until(lambda: len([g for g in early.gates if g.recorded is not None]) >= recorded, timeout=30)
    return item, early


def test_a_recorded_gate_whose_task_run_cannot_be_drawn_is_said_once(
    prefect_api: str, service: Service, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Drawing a recorded first gate's task run fails (here: every time): the
    drive says so once, as a warning, and goes on; each gate still ran once
    and is recorded, and the drive ends well."""
    from milepost.flows import plan_nodes
    from milepost.flows.drive import run_drive

    plan = (
        "objective: undrawn\nmilestones:\n  - {name: one, gate: 'true'}\n  - {name: two, gate: 'true'}\n"
        "  - {name: three, deps: [one, two], gate: 'true'}\n  - {name: four, deps: [three], gate: 'true'}\n"
    )
    item, early = recorded_early(service, plan, 2, 3)

    def refused(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("the events client is closed")

    monkeypatch.setattr(plan_nodes, "ran_node", refused)
    reporter = RecordingReporter()
    summary = run_drive(service, item, max_parallel=2, reporter=reporter, early=early)
    assert summary.ok and summary.gate_runs == 4, summary
    warnings = [data for event, data in reporter.events if event is DriveEvent.WARNING]
    assert len(warnings) == 1, warnings
    assert "could not draw" in warnings[0] and "the events client is closed" in warnings[0], warnings
    assert "passed and is recorded" in warnings[0]
    for name in ("one", "two", "three", "four"):
        assert [r.outcome.value for r in service.runs(name, item)] == ["passed"], name


def test_a_drives_duration_counts_from_its_first_gates(prefect_api: str, service: Service) -> None:
    """The summary's duration counts from the early start, not from the flow
    run's: here the first gates ran and were recorded a while before the loop
    began, and the drive's time holds all of it."""
    from milepost.flows.drive import run_drive

    plan = (
        "objective: timed\nmilestones:\n  - {name: one, gate: 'sleep 0.3'}\n"
        "  - {name: two, deps: [one], gate: 'sleep 0.3'}\n  - {name: three, deps: [two], gate: 'true'}\n"
    )
    t0 = time.monotonic()
    item, early = recorded_early(service, plan, 1, 2)
    time.sleep(1.0)  # (as Prefect's import would take)
    summary = run_drive(service, item, reporter=RecordingReporter(), early=early)
    whole = time.monotonic() - t0
    assert summary.ok and summary.gate_runs == 3, summary
    assert whole - 0.5 <= summary.duration <= whole, (summary.duration, whole)  # (without: 1.6 s less)


def test_first_gates_recorded_before_the_flow_run_are_told_in_the_order_they_ran(
    prefect_api: str, service: Service
) -> None:
    """Two first gates ran side by side while Prefect loaded and were recorded,
    then a third after them: the drive tells both starts before either end,
    each with its own time, where it told each gate's start and end in turn."""
    from milepost.flows.drive import run_drive

    plan = (
        "objective: side by side\nmilestones:\n  - {name: one, gate: 'sleep 0.4'}\n"
        "  - {name: two, gate: 'sleep 0.4'}\n  - {name: three, deps: [one, two], gate: 'true'}\n"
    )
    item, early = recorded_early(service, plan, 2, 3)
    reporter = RecordingReporter()
    summary = run_drive(service, item, max_parallel=2, reporter=reporter, early=early)
    assert summary.ok and summary.gate_runs == 3, summary
    gates = (DriveEvent.GATE_STARTED, DriveEvent.GATE_FINISHED)
    told = [(e.value, data[0]) for e, data in reporter.events if e in gates]
    assert [kind for kind, _ in told[:2]] == ["gate_started", "gate_started"], told
    assert {name for _, name in told[:2]} == {"one", "two"} and told[-2:][0] == ("gate_started", "three"), told
    starts = {g.claim.milestone.name: g.started for g in early.gates}
    assert reporter.started_at == starts, (reporter.started_at, starts)


def test_a_stale_milestone_is_told_with_the_time_it_was_found_before_its_gate(
    cli: CLI, workspace: Path, prefect_api: str
) -> None:
    """The first look finds a stale milestone and re-proves it before Prefect
    loads; its stale_found is told after, stamped when it was found, so the
    gate's start keeps its own time (a stamp never goes back: told with the
    time it was told, it pushed the early gate's forward, by seconds on click)."""
    (workspace / "x.txt").write_text("1\n")
    cli("item", "create", "stale", check=True)
    cli("add", "first", "--gate", STAMP, "--inputs", "x.txt", check=True)
    assert cli("drive", timeout=240).code == 0
    (workspace / "x.txt").write_text("2\n")
    r = cli("--json", "drive", timeout=240)
    assert r.code == 0, r.err + r.out
    events = [json.loads(line) for line in r.out.splitlines()]
    stale = next(e for e in events if e["event"] == "stale_found")
    gate = next(e for e in events if e["event"] == "gate_started" and e["milestone"] == "first")
    ran = float((workspace / "started-2").read_text())  # (its re-proof is attempt 2)
    assert datetime.fromisoformat(stale["at"]) <= datetime.fromisoformat(gate["at"]), (stale, gate)
    assert datetime.fromisoformat(gate["at"]).timestamp() <= ran, (gate, ran)  # its own start, not pushed on
    stamps = [datetime.fromisoformat(e["at"]) for e in events]
    assert stamps == sorted(stamps), events


def test_an_early_start_the_cli_checked_just_before_does_not_check_again(
    service: Service, workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The CLI's drive asks nothing_to_run before it starts the first gates (a drive with nothing to run ends
    there, no Prefect); the early start looks again only when not told it was just done (a proof check of every
    milestone each time: a tenth of a second of a no-op drive on click before its first gate)."""
    from milepost.flows import early
    from milepost.service import drive

    asked: list[int] = []
    real = drive.nothing_to_run
    monkeypatch.setattr(drive, "nothing_to_run", lambda svc, item, *a: asked.append(item) or real(svc, item, *a))
    for checked in (False, True):
        plan = f"objective: once\nmilestones:\n  - {{name: one-{str(checked).lower()}, gate: 'true'}}\n"
        item = service.apply_plan(parse_plan(plan)).id
        asked.clear()
        start = early.start_first_gates(service, item, checked=checked)
        assert start is not None and asked == ([] if checked else [item])
        wait_until(lambda: all(g.recorded is not None for g in start.gates), timeout=60)  # noqa: B023
        start.settle(interrupt=False)

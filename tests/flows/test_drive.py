"""The drive loop against a real Prefect server, with real subprocess gates."""

from __future__ import annotations

import base64
import contextlib
import os
import shutil
import signal
import subprocess
import threading
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from milepost.errors import StaleRevisionError
from milepost.flows.drive import run_drive
from milepost.graph import MilestoneStatus
from milepost.planfile import parse_plan
from milepost.service import Service
from tests.conftest import CLI, EXAMPLES, MovableClock, ctrl_c_once, runs_program, wait_until
from tests.flows.conftest import api_get, api_post, flow_run_edges
from tests.recording import RecordingReporter

pytestmark = pytest.mark.xdist_group("prefect")

S = MilestoneStatus


def apply(service: Service, text: str) -> int:
    return service.apply_plan(parse_plan(text)).id


def gate_order(service: Service, item: int) -> list[tuple[str, int]]:
    runs = [r for m in service.get_item(item).milestones for r in service.runs(m.name, item)]
    return [(r.milestone, r.attempt) for r in sorted(runs, key=lambda r: r.started_at)]


def test_sequential_drive_of_the_example_in_lowest_id_order(
    prefect_api: str, service: Service, workspace: Path
) -> None:
    for p in (EXAMPLES / "refactor").iterdir():
        (shutil.copytree if p.is_dir() else shutil.copy)(p, workspace / p.name)
    item = service.apply_plan(parse_plan((workspace / "plan.yaml").read_text())).id
    rec = RecordingReporter()
    summary = run_drive(service, item, reporter=rec)
    assert summary.ok and summary.message == "all 9 milestones are done"
    started = [e[1][0] for e in rec.events if e[0] == "gate_started"]
    assert started == [
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
    assert [n for n, _ in gate_order(service, item)] == started
    # The flow run: Completed, named after the item, its graph the DAG's edges.
    fr = api_get(prefect_api, f"/flow_runs/{summary.flow_run_id}")
    assert fr["state_type"] == "COMPLETED" and fr["name"].startswith(f"item-{item}: Extract interfaces")
    labels, edges = flow_run_edges(prefect_api, summary.flow_run_id or "")
    dag = {(d, m.name) for m in service.get_item(item).milestones for d in m.deps}
    assert labels == set(started) and edges == dag
    # Artifacts: progress, summary with the DAG as an SVG image, the milestone table.
    arts = api_post(prefect_api, "/artifacts/filter", {"artifacts": {"flow_run_id": {"any_": [summary.flow_run_id]}}})
    by_type = {a["type"]: a for a in arts}
    assert set(by_type) >= {"progress", "markdown", "table"}
    assert by_type["progress"]["data"] == 100.0
    md = by_type["markdown"]["data"]
    assert "```mermaid" not in md
    svg = base64.b64decode(md.split("(data:image/svg+xml;base64,", 1)[1].split(")", 1)[0]).decode()
    assert svg.startswith("<svg") and all(f">{name}</text>" in svg for name in started)


def test_gate_output_reaches_the_task_run_logs(prefect_api: str, service: Service) -> None:
    """A command's output reaches its task run's log after the command's
    header; a quiet passing gate sends no line; a quiet failing one sends
    its header (which command failed). Every header stays in the log file."""
    item = apply(
        service,
        "objective: logs\nmilestones:\n"
        "  - {name: talk, gate: 'echo hello-from-the-gate; exit 0'}\n"
        "  - {name: quiet, gate: 'true'}\n"
        "  - {name: sulk, gate: 'exit 3', retries: 0}\n",
    )
    summary = run_drive(service, item)
    runs = api_post(prefect_api, "/task_runs/filter", {"flow_runs": {"id": {"any_": [summary.flow_run_id]}}})
    by_name = {r["name"]: r["id"] for r in runs}

    def messages(name: str) -> list[str]:
        logs = api_post(prefect_api, "/logs/filter", {"logs": {"task_run_id": {"any_": [by_name[name]]}}})
        return [entry["message"] for entry in sorted(logs, key=lambda e: e["timestamp"])]

    wait_until(lambda: "hello-from-the-gate" in messages("talk") and messages("sulk"), timeout=20)
    said = messages("talk")
    at = said.index("hello-from-the-gate")
    assert at > 0 and said[at - 1] == "=== [gate] $ echo hello-from-the-gate; exit 0", said
    assert "=== [gate] $ exit 3" in messages("sulk")
    assert not any(m.startswith("=== [") for m in messages("quiet")), messages("quiet")
    for name in ("talk", "quiet", "sulk"):
        assert service.log_path(item, name, 1).read_text().startswith("=== [gate] $ ")


@pytest.mark.parametrize("parallel", [1, 2])
def test_one_gate_at_a_time_runs_in_the_drives_thread(
    prefect_api: str, service: Service, monkeypatch: pytest.MonkeyPatch, parallel: int
) -> None:
    """With one gate at a time on threads each gate task runs in the loop's
    own thread (flows/gate_task.call_inline), the same task runs as from a
    pool: named, their deps' runs as parents. More at a time: a pool's threads."""
    from milepost.flows import gate_task

    threads: list[int] = []
    real = gate_task.run_gate_spec

    def spy(spec: gate_task.GateSpec, units: Any = None, box: Any = None) -> Any:
        threads.append(threading.get_ident())
        return real(spec, units, box)

    monkeypatch.setattr(gate_task, "run_gate_spec", spy)
    item = apply(
        service,
        "objective: threads\nmilestones:\n  - {name: a, gate: 'true'}\n  - {name: b, deps: [a], gate: 'true'}\n"
        "  - {name: c, deps: [b], gate: 'exit 1', retries: 1}\n",
    )
    summary = run_drive(service, item, max_parallel=parallel)
    assert not summary.ok and len(threads) == 4  # a, b, and both attempts of c
    here = threading.get_ident()
    assert all(t == here for t in threads) if parallel == 1 else all(t != here for t in threads), threads
    labels, edges = flow_run_edges(prefect_api, summary.flow_run_id or "")
    assert {"a", "b", "c"} <= labels and {("a", "b"), ("b", "c")} <= edges
    runs = api_post(prefect_api, "/task_runs/filter", {"flow_runs": {"id": {"any_": [summary.flow_run_id]}}})
    got = sorted((r["name"], r["state_name"]) for r in runs if r["name"] in "abc")
    assert got == [("a", "Completed"), ("b", "Completed"), ("c", "Needs fix"), ("c", "Stuck")]


def test_flaky_gate_ends_done_with_two_attempts(prefect_api: str, service: Service, workspace: Path) -> None:
    counter = workspace / "count"
    gate = f"n=$(cat {counter} 2>/dev/null || echo 0); echo $((n+1)) > {counter}; test $n -ge 1"
    item = apply(service, f"objective: flaky\nmilestones:\n  - name: flaky\n    gate: '{gate}'\n")
    summary = run_drive(service, item)
    assert summary.ok
    m = service.get_item(item).milestones[0]
    assert m.status is S.DONE and m.attempts == 2
    assert [r.outcome.value for r in service.runs("flaky", item)] == ["failed", "passed"]
    # Both attempts are task runs named after the milestone: the failed one red, the retry green.
    runs = api_post(prefect_api, "/task_runs/filter", {"flow_runs": {"id": {"any_": [summary.flow_run_id]}}})
    assert sorted((r["name"], r["state_type"]) for r in runs) == [("flaky", "COMPLETED"), ("flaky", "FAILED")]


def test_failing_gate_is_stuck_after_budget_and_other_branches_finish(
    prefect_api: str, cli: CLI, workspace: Path
) -> None:
    (workspace / "plan.yaml").write_text(
        "objective: stuck\nmilestones:\n"
        "  - {name: bad, gate: 'echo run >> bad.txt; exit 1', retries: 2}\n"
        "  - {name: after-bad, deps: [bad], gate: 'true'}\n"
        "  - {name: good, gate: 'true'}\n"
        "  - {name: after-good, deps: [good], gate: 'true'}\n"
    )
    cli("plan", "apply", "plan.yaml", check=True)
    r = cli("drive")
    assert r.code == 1, r.err
    assert (workspace / "bad.txt").read_text().count("run") == 3
    shown = {m["name"]: m for m in cli.json("list")["milestones"]}
    assert shown["bad"]["status"] == "stuck" and shown["bad"]["attempts"] == 3
    assert shown["after-bad"]["status"] == "pending"
    assert shown["good"]["status"] == "done" and shown["after-good"]["status"] == "done"
    assert "stuck: bad (blocks after-bad)" in r.out
    # One message per cause, printed once, no prefix repeated ("not done: not done: ..."), and the
    # blocked milestone named once, by what blocks it.
    assert r.out.count("stuck: bad (blocks after-bad)") == 1 and "not done: not done" not in r.out
    assert "blocked: after-bad" not in r.out
    # The stuck milestone's time: this drive's three attempts, and the total of all its runs.
    row = next(ln for ln in r.out.splitlines() if ln.split()[:2] == ["1", "bad"])
    assert " 3 " in row  # its last attempt's number
    fr_id = next(ln for ln in r.out.splitlines() if "flow run:" in ln).rsplit("/", 1)[1]
    fr = api_get(prefect_api, f"/flow_runs/{fr_id}")
    assert fr["state_type"] == "FAILED" and "stuck: bad" in fr["state"]["message"]


def test_parallel_drive_overlaps_and_respects_the_limit(prefect_api: str, service: Service, workspace: Path) -> None:
    log = workspace / "spans.txt"
    gate = f"echo start $(date +%s.%N) >> {log}; sleep 1; echo end $(date +%s.%N) >> {log}"
    ms = "".join(f"  - {{name: w{i}, gate: '{gate}'}}\n" for i in range(6))
    item = apply(service, f"objective: wide\nmilestones:\n{ms}  - {{name: join, deps: [w0, w1, w2, w3, w4, w5]}}\n")
    rec = RecordingReporter()
    summary = run_drive(service, item, max_parallel=3, reporter=rec)
    assert summary.ok
    events = sorted(
        (float(t), 1 if kind == "start" else -1) for kind, t in (ln.split() for ln in log.read_text().splitlines())
    )
    live, peak = 0, 0
    for _, step in events:
        live += step
        peak = max(peak, live)
    assert peak == 3  # really overlapping, never more than N
    # The gates' own span (first start to last end), not the driver's wall time, so a loaded machine's
    # Prefect overhead cannot flake it: two waves of 1 s are ~2 s, clearly less than the 6 s sequential sum.
    assert events[-1][0] - events[0][0] < 4.0
    assert [e[1][0] for e in rec.events if e[0] == "gate_started"][:3] == ["w0", "w1", "w2"]


def test_two_drivers_run_every_gate_exactly_once(prefect_api: str, cli: CLI, workspace: Path) -> None:
    ms = "".join(f"  - {{name: m{i}, gate: 'echo m{i} >> ran.txt; sleep 0.3'}}\n" for i in range(8))
    (workspace / "plan.yaml").write_text(f"objective: two drivers\nmilestones:\n{ms}")
    cli("plan", "apply", "plan.yaml", check=True)
    procs = [cli.popen("drive", "1", "--max-parallel", "2") for _ in range(2)]
    outs = [p.communicate(timeout=180) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs  # the one left with nothing to run waited for the other
    lines = (workspace / "ran.txt").read_text().split()
    assert sorted(lines) == sorted(f"m{i}" for i in range(8))
    assert all(m["status"] == "done" for m in cli.json("list")["milestones"])


def test_a_drive_does_not_start_a_gate_another_driver_runs(prefect_api: str, cli: CLI, workspace: Path) -> None:
    """Sent back by hand while ``done`` runs its gate, a milestone keeps that
    lease: a drive does not start it again (it says why and goes on with the
    rest), and ``done``'s outcome is kept as evidence only. With nothing else
    to run, the drive waits for that lease and then runs the gate itself,
    after ``done``'s run ended, never beside it."""
    marker, release = workspace / "started", workspace / "release"
    hold = f"touch {marker}; while [ ! -e {release} ]; do sleep 0.1; done"
    plan = f"objective: busy\nmilestones:\n  - {{name: slow, gate: '{hold}'}}\n  - {{name: other, gate: 'true'}}\n"
    (workspace / "plan.yaml").write_text(plan)
    cli("plan", "apply", "plan.yaml", check=True)
    cli("start", "slow", check=True)
    first = cli.popen("done", "slow")
    drive: subprocess.Popen[str] | None = None
    try:
        wait_until(marker.exists, 60, f"{marker} to appear", step=0.1)
        cli("needs-fix", "slow", "--reason", "seen broken by hand", check=True)
        drive = cli.popen("drive")
        assert drive.stdout is not None
        said: list[str] = []
        reader = threading.Thread(target=lambda: said.extend(iter(drive.stdout.readline, "")))  # type: ignore[union-attr]
        reader.start()
        # done's gate runs until the drive says it waits for slow's lease (however slow the machine).
        # (the warning before it says "wait for it" too: only the wait line itself releases done's gate)
        waits = ("wait   for other drivers", "ok:", "not done")
        wait_until(lambda: any(w in line for line in said for w in waits), 120, "the drive to wait", step=0.1)
        release.touch()
        drive.wait(timeout=120)
        reader.join(timeout=30)
        assert drive.stderr is not None
        out, err = "".join(said), drive.stderr.read()
        drive.stdout.close()
        drive.stderr.close()
    finally:
        release.touch()
        if drive is not None and drive.returncode is None:
            drive.kill()
            drive.communicate()
        first.communicate(timeout=60)
    assert drive.returncode == 0, err + out
    assert "slow not started: cannot run the gate of 'slow': it is already running" in out, out
    assert "wait   for other drivers: slow (" in out
    runs = cli.json("runs", "slow")["runs"]
    assert [x["outcome"] for x in runs] == ["passed", "passed"]  # done's attempt, then the drive's own
    assert runs[1]["started_at"] >= runs[0]["finished_at"]
    shown = {m["name"]: m["status"] for m in cli.json("list")["milestones"]}
    assert shown == {"slow": "done", "other": "done"}


def test_sigkill_leaves_a_lease_the_next_drive_reclaims(
    prefect_api: str, cli: CLI, workspace: Path, clock: MovableClock
) -> None:
    marker = workspace / "started"
    gate = f"if [ -e {marker} ]; then exit 0; fi; echo $$ > {marker}; sleep 60"
    (workspace / "plan.yaml").write_text(f"objective: kill\nmilestones:\n  - name: slow\n    gate: '{gate}'\n")
    cli("plan", "apply", "plan.yaml", check=True)
    proc = cli.popen("drive", MILEPOST_LEASE_TTL="3")
    wait_until(marker.exists, 60, f"{marker} to appear", step=0.1)
    time.sleep(0.3)
    killed_at = datetime.now(UTC)
    proc.kill()
    proc.communicate(timeout=30)
    gate_pid = int(marker.read_text())
    with contextlib.suppress(ProcessLookupError):  # its gate supervisor may have stopped it already
        os.kill(gate_pid, signal.SIGKILL)  # the orphaned gate (its own session) would run on
    assert cli.json("list")["milestones"][0]["status"] == "in_progress"
    clock.advance(3.5)  # the lease expires (for this process's drive)
    r = cli("drive", MILEPOST_LEASE_TTL="3")
    assert r.code == 0, r.err + r.out
    m = cli.json("list")["milestones"][0]
    assert m["status"] == "done" and m["attempts"] == 1  # the interrupted attempt spent no budget
    runs = cli.json("runs", "slow")["runs"]
    assert [x["outcome"] for x in runs] == ["interrupted", "passed"]
    assert "lease" in runs[0]["reason"]
    # The interrupted attempt ran from its claim until its supervisor stopped it: that is its time.
    assert datetime.fromisoformat(runs[0]["started_at"]) < killed_at
    assert runs[0]["duration"] >= 0.3


def test_a_frozen_drive_says_its_outcome_was_not_applied(
    prefect_api: str, cli: CLI, workspace: Path, clock: MovableClock
) -> None:
    """Frozen past its lease, a drive's attempt is fenced and recorded by the
    next drive; when the frozen one wakes, it says its outcome is not applied."""
    marker = workspace / "started"
    gate = f"if [ -e {marker} ]; then exit 0; fi; echo $$ > {marker}; sleep 30"
    (workspace / "plan.yaml").write_text(f"objective: freeze\nmilestones:\n  - name: slow\n    gate: '{gate}'\n")
    cli("plan", "apply", "plan.yaml", check=True)
    frozen = cli.popen("drive", MILEPOST_LEASE_TTL="1")
    try:
        wait_until(marker.exists, 60, f"{marker} to appear", step=0.1)
        os.kill(frozen.pid, signal.SIGSTOP)
        clock.advance(1.5)  # its lease expires (for this process's drive): nobody renews it
        r = cli("drive", MILEPOST_LEASE_TTL="1")  # fences attempt 1 (kills its gate), runs attempt 2
        assert r.code == 0, r.err + r.out
    finally:
        os.kill(frozen.pid, signal.SIGCONT)
    out, err = frozen.communicate(timeout=60)
    # (The second drive recorded attempt 1 and has released the lease: the store holds it already.)
    assert "warning: slow: attempt 1 of 'slow' is in the store already; this outcome is not applied" in err + out, (
        err + out
    )
    runs = cli.json("runs", "slow")["runs"]
    assert [x["outcome"] for x in runs] == ["interrupted", "passed"]  # recorded once each, by the second drive


@pytest.mark.parametrize("parallel", [1, 2])
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_a_stop_signal_exits_130_and_the_milestone_is_ready_again(
    prefect_api: str, cli: CLI, workspace: Path, sig: signal.Signals, parallel: int
) -> None:
    """The attempt ends as one the drive stopped: recorded once, with its
    duration, its task run ``Interrupted``; then the drive stops. One gate
    at a time, the gate's task runs in the thread the signal reaches
    (flows/gate_task.call_inline); more, in a pool's thread."""
    marker = workspace / "started"
    name = f"slow-{sig.name.lower()}-{parallel}"  # its task run, found by name on the shared server
    (workspace / "plan.yaml").write_text(
        f"objective: interrupt\nmilestones:\n  - name: {name}\n    gate: 'echo $$ > {marker}; sleep 60'\n"
    )
    cli("plan", "apply", "plan.yaml", check=True)
    proc = cli.popen("drive", "--max-parallel", str(parallel))

    def task_run_states() -> list[str]:
        found = api_post(prefect_api, "/task_runs/filter", {"task_runs": {"name": {"any_": [name]}}})
        return [r["state_name"] for r in found]

    wait_until(marker.exists, 60, f"{marker} to appear", step=0.1)
    # (The first gate starts before the flow run does, while Prefect is imported: tests/flows/test_early_start.py
    # stops a drive then; here its task run is running.)
    wait_until(lambda: task_run_states() == ["Running"], 60, f"{name}'s task run to run", step=0.1)
    gate_pid = int(marker.read_text())
    wait_until(lambda: runs_program(gate_pid, "sleep"), 30, "the gate running sleep")  # (its pid is written first)
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, (out, err)
    # The gate's process group was killed (gone, or a zombie waiting for init).
    assert not Path(f"/proc/{gate_pid}").exists() or "Z" in Path(f"/proc/{gate_pid}/stat").read_text().split()[2]
    m = cli.json("list")["milestones"][0]
    assert m["status"] == "pending" and m["view"] == "ready" and m["attempts"] == 0
    assert m["reason"] == "interrupted: the drive stopped"  # the cause once, not "interrupted: interrupted: ..."
    [run] = cli.json("runs", name)["runs"]
    assert run["outcome"] == "interrupted" and run["reason"] == "interrupted: the drive stopped"
    assert run["duration"] >= 0.3  # the time it ran, as a stopped gate reports it
    # (no "Not run" node: an interrupted drive, by either signal, adds none)
    wait_until(lambda: task_run_states() == ["Interrupted"], 30, f"{name}'s task run to be Interrupted")


def test_review_gate_waits_for_an_operator(prefect_api: str, cli: CLI, workspace: Path) -> None:
    (workspace / "plan.yaml").write_text(
        "objective: review\nmilestones:\n"
        "  - {name: design, gate: 'true', review: true}\n"
        "  - {name: build, deps: [design], gate: 'true'}\n"
        "  - {name: docs, gate: 'true'}\n"
    )
    cli("plan", "apply", "plan.yaml", check=True)
    r = cli("drive")
    assert r.code == 1 and "waiting for review: design" in r.out
    shown = {m["name"]: m for m in cli.json("list")["milestones"]}
    assert shown["design"]["view"] == "in_review" and shown["docs"]["status"] == "done"
    assert cli.json("item", "show")["readiness"] == "waiting_for_operator"
    r = cli("reject", "design", "--reason", "too big")
    assert r.code == 0 and "design: in_progress -> needs_fix" in r.out
    cli("drive")  # passes again, waits for review again
    cli("approve", "design", check=True)
    r = cli("drive")
    assert r.code == 0, r.out


def test_fix_hook_runs_between_attempts_with_its_context(prefect_api: str, service: Service, workspace: Path) -> None:
    fixed = workspace / "fixed"
    env_out = workspace / "fix-env.txt"
    fix = f"echo $MILEPOST_ITEM $MILEPOST_MILESTONE $MILEPOST_ATTEMPT $MILEPOST_FAILURE_LOG > {env_out}; touch {fixed}"
    item = apply(
        service,
        f"objective: fix\nmilestones:\n  - name: lint\n    gate: 'test -e {fixed}'\n    fix: '{fix}'\n",
    )
    summary = run_drive(service, item)
    assert summary.ok
    got_item, got_name, got_attempt, got_log = env_out.read_text().split()
    assert (got_item, got_name, got_attempt) == (str(item), "lint", "1")
    assert got_log.endswith("lint/attempt-1.log") and Path(got_log).is_file()
    assert service.get_item(item).milestones[0].attempts == 2
    refs = [(r.kind, r.ref) for r in service.refs(item)]
    assert [k for k, _ in refs] == ["gate_run", "fix", "gate_run"]  # attempt 1, its fix, attempt 2
    assert refs[1][1].endswith("attempt-1.fix.log")


def test_retry_delay_backs_off(prefect_api: str, service: Service, workspace: Path) -> None:
    stamps = workspace / "stamps"
    gate = f"date +%s.%N >> {stamps}; test $(wc -l < {stamps}) -ge 3"
    item = apply(service, f"objective: backoff\nmilestones:\n  - name: net\n    retry_delay: 1\n    gate: '{gate}'\n")
    summary = run_drive(service, item)
    assert summary.ok
    t = [float(x) for x in stamps.read_text().split()]
    assert len(t) == 3
    assert t[1] - t[0] >= 1.0 and t[2] - t[1] >= 2.0  # 1 s, then 2 s


def test_a_drive_whose_body_fails_before_its_summary_raises_the_error(prefect_api: str, service: Service) -> None:
    """An error in the flow body before there is a summary (here the
    caller's reporter) is raised by run_drive as it is, never turned into a
    summary of the item's statuses (which read ok when all was done)."""
    from milepost.events import NullReporter

    class Broken(NullReporter):
        def drive_started(self, item: int, objective: str, total: int, flow_run_id: str | None) -> None:
            raise RuntimeError("the reporter broke")

    item = apply(service, "objective: done\nmilestones:\n  - {name: a, gate: 'true'}\n  - {name: b, gate: 'true'}\n")
    assert run_drive(service, item, until="a").ok  # (all done, a drive has nothing to run: no flow run, no body)
    with pytest.raises(RuntimeError, match="the reporter broke"):
        run_drive(service, item, reporter=Broken())


def test_until_and_dry_run(prefect_api: str, cli: CLI, workspace: Path) -> None:
    for p in (EXAMPLES / "refactor").iterdir():
        (shutil.copytree if p.is_dir() else shutil.copy)(p, workspace / p.name)
    cli("plan", "apply", "plan.yaml", check=True)
    order = cli.json("drive", "--dry-run", "--until", "extract-b")["order"]
    assert order == ["analyze-b", "extract-b"]
    junit = workspace / "junit.xml"
    r = cli("drive", "--until", "extract-b", "--junit", str(junit))
    # --until judges its target and its deps: they are done, so the step passes.
    assert r.code == 0, r.out + r.err
    assert "extract-b and the milestone it depends on are done" in r.out
    done = [m["name"] for m in cli.json("list")["milestones"] if m["status"] == "done"]
    assert done == ["analyze-b", "extract-b"]
    import xml.etree.ElementTree as ET

    suite = ET.parse(junit).getroot()
    assert (suite.get("failures"), suite.get("skipped")) == ("0", "7")
    skipped = {c.get("name"): c.find("skipped") for c in suite.iter("testcase")}
    assert skipped["merge"] is not None and skipped["merge"].get("message") == "outside --until extract-b"


def test_json_events(prefect_api: str, cli: CLI) -> None:
    cli("item", "create", "events", check=True)
    cli("add", "a", "--gate", "true", check=True)
    import json

    r = cli("--json", "drive")
    events = [json.loads(ln) for ln in r.out.splitlines()]
    assert [e["event"] for e in events] == ["drive_started", "gate_started", "gate_finished", "drive_finished"]
    assert events[2]["status"] == "done" and events[-1]["ok"] is True


def test_dask_runner_on_a_local_cluster(prefect_api: str, service: Service, workspace: Path) -> None:
    out = workspace / "pids"
    ms = "".join(f"  - {{name: d{i}, gate: 'echo $PPID >> {out}; sleep 0.5'}}\n" for i in range(4))
    item = apply(
        service, f"objective: dask\nmilestones:\n{ms}  - {{name: end, deps: [d0, d1, d2, d3], gate: 'true'}}\n"
    )
    os.environ.setdefault("DASK_DISTRIBUTED__LOGGING__DISTRIBUTED", "warning")
    summary = run_drive(service, item, max_parallel=2, task_runner="dask")
    assert summary.ok, summary.message
    # Gates ran in Dask worker processes, not in this one.
    assert str(os.getpid()) not in out.read_text().split()
    _labels, edges = flow_run_edges(prefect_api, summary.flow_run_id or "")
    assert edges == {(f"d{i}", "end") for i in range(4)}


@pytest.mark.postgres
def test_drive_on_a_postgresql_store(prefect_api: str, postgres, workspace: Path) -> None:  # type: ignore[no-untyped-def]
    """The shared-database setup: the store on a PostgreSQL server, two gates
    in parallel, one flaky, the DAG's edges in the flow run."""
    from milepost.store import Store

    svc = Service(Store.open(postgres.create_db("mp_drive"), workspace / ".milepost", workspace, create=True))
    counter = workspace / "count"
    flaky = f"n=$(cat {counter} 2>/dev/null || echo 0); echo $((n+1)) > {counter}; test $n -ge 1"
    item = apply(
        svc,
        "objective: on postgres\nmilestones:\n"
        f"  - {{name: a, gate: 'true'}}\n  - name: b\n    gate: '{flaky}'\n"
        "  - {name: c, deps: [a, b], gate: 'true'}\n",
    )
    summary = run_drive(svc, item, max_parallel=2)
    assert summary.ok, summary.message
    assert [(m.name, m.attempts) for m in svc.get_item(item).milestones] == [("a", 1), ("b", 2), ("c", 1)]
    _, edges = flow_run_edges(prefect_api, summary.flow_run_id or "")
    assert edges == {("a", "c"), ("b", "c")}
    svc.close()


class _WriterAtStart(RecordingReporter):
    """Another writer changes the item just after the drive's check and before its first claim."""

    def __init__(self, other: Service, item: int) -> None:
        super().__init__()
        self.other, self.item = other, item

    def drive_started(self, item: int, objective: str, total: int, flow_run_id: str | None) -> None:
        super().drive_started(item, objective, total, flow_run_id)
        self.other.update_item(self.item, objective="changed under the drive")


def test_expect_revision_guards_the_drives_first_claim(prefect_api: str, service: Service, workspace: Path) -> None:
    marker = workspace / "ran.txt"
    item = apply(service, f"objective: guarded\nmilestones:\n  - {{name: a, gate: 'echo a >> {marker}'}}\n")
    rev = service.get_item(item).revision
    other = Service.open(cwd=workspace)
    try:
        with pytest.raises(StaleRevisionError, match=f"work item {item} is at revision {rev + 1}, not {rev}"):
            run_drive(service, item, expect_revision=rev, reporter=_WriterAtStart(other, item))
    finally:
        other.close()
    it = service.get_item(item)
    assert it.revision == rev + 1 and it.objective == "changed under the drive"  # only the other writer's change
    assert it.milestones[0].status is S.PENDING and service.runs("a", item) == [] and not marker.exists()
    # With the current revision the drive goes ahead.
    assert run_drive(service, item, expect_revision=rev + 1).ok and marker.read_text() == "a\n"


def _drive_on_a_terminal(
    cli: CLI, stop_after: Path | None = None, sig: int = signal.SIGINT, release: tuple[str, Path] | None = None
) -> tuple[int, str]:
    """``milepost drive`` with a pseudo-terminal as its stdout (so it shows the live table); with
    ``stop_after``, send ``sig`` once that file appears and the table shows a gate running; with
    ``release`` (text, file), make the file once the text is shown. Returns the exit code and everything shown."""
    import pty
    import subprocess
    import sys
    import threading

    master, slave = pty.openpty()
    env = {**cli.env, "TERM": "xterm-256color", "COLUMNS": "120", "LINES": "40"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "milepost", "drive"], cwd=cli.cwd, env=env, stdin=slave, stdout=slave, stderr=slave
    )
    os.close(slave)
    chunks: list[bytes] = []

    def read() -> None:
        while True:
            try:
                data = os.read(master, 65536)
            except OSError:  # the terminal closed: the process and its children are gone
                return
            if not data:
                return
            chunks.append(data)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    shown = lambda: b"".join(chunks).decode(errors="replace")  # noqa: E731
    if release is not None:
        wait_until(lambda: release[0] in shown(), 120, f"{release[0]!r} shown", step=0.1)
        release[1].touch()
    if stop_after is not None:
        wait_until(stop_after.exists, 60, f"{stop_after} to appear", step=0.1)
        # (The first gate starts while Prefect is imported, before the live table: wait for the table to show it.)
        wait_until(lambda: HIDE_CURSOR in shown() and "running: " in shown(), 60, "the live table", step=0.1)
        proc.send_signal(sig)
    code = proc.wait(timeout=120)
    reader.join(timeout=10)
    os.close(master)
    return code, b"".join(chunks).decode(errors="replace")


HIDE_CURSOR, SHOW_CURSOR = "\x1b[?25l", "\x1b[?25h"


def test_a_terminal_gets_the_live_table_and_its_cursor_back(prefect_api: str, cli: CLI, workspace: Path) -> None:
    # The second gate runs until the test has seen the table show it running (at most a minute).
    release = workspace / "release"
    wait = f"for i in $(seq 600); do [ -e {release} ] && exit 0; sleep 0.1; done; exit 1"
    (workspace / "plan.yaml").write_text(
        f"objective: live\nmilestones:\n  - {{name: first, gate: 'sleep 1'}}\n"
        f"  - {{name: second, deps: [first], gate: '{wait}'}}\n"
    )
    cli("plan", "apply", "plan.yaml", check=True)
    code, shown = _drive_on_a_terminal(cli, release=("running: second", release))
    assert code == 0, shown
    # The live view, updated while a gate ran (the first, and the start of the second, may come while Prefect is
    # imported, before the view: the second runs until the view has shown it).
    assert "elapsed" in shown and "running: second" in shown
    assert "all 2 milestones are done" in shown and "first" in shown and "second" in shown  # then the summary
    assert shown.rfind(SHOW_CURSOR) > shown.rfind(HIDE_CURSOR) >= 0


def test_ctrl_c_on_a_terminal_exits_130_with_the_cursor_back(prefect_api: str, cli: CLI, workspace: Path) -> None:
    marker = workspace / "started"
    (workspace / "plan.yaml").write_text(
        f"objective: live\nmilestones:\n  - {{name: slow, gate: 'touch {marker}; sleep 60'}}\n"
    )
    cli("plan", "apply", "plan.yaml", check=True)
    code, shown = _drive_on_a_terminal(cli, stop_after=marker)
    assert code == 130, shown
    assert "interrupted" in shown
    assert shown.rfind(SHOW_CURSOR) > shown.rfind(HIDE_CURSOR) >= 0
    assert cli.json("list")["milestones"][0]["view"] == "ready"


@pytest.mark.parametrize("passed", [True, False])
def test_the_log_follower_holds_headers_by_their_place_not_their_text(tmp_path: Path, passed: bool) -> None:
    """Output that reads like a line of a command's header (a heredoc's
    lines, an empty line) is output: forwarded whatever the verdict. The
    headers go before the output that follows them; at the end only an
    attempt that did not pass sends the headers left over."""
    from types import SimpleNamespace

    from milepost.flows.gate_task import _Watched
    from milepost.gates.command import command_header
    from milepost.graph import GateCommand

    first = GateCommand(name="talk", run="cat <<EOF\nall good\nEOF\necho\n")
    second = GateCommand(name="quiet", run="true")
    log = tmp_path / "attempt-1.log"
    log.write_text(command_header(first) + "first\n\nall good\n\n" + command_header(second))
    sent: list[str] = []
    logger = SimpleNamespace(info=sent.append, warning=sent.append)
    spec = SimpleNamespace(commands=[first, second], log_path=str(log), stop_file=str(tmp_path / "stop"), driver={})
    _Watched(spec, logger, 100).finish(passed)  # type: ignore[arg-type]
    header = command_header(first).split("\n")[:-1]
    assert sent == [*header, "first", "", "all good", ""] + (["=== [quiet] $ true"] if not passed else [])


@pytest.mark.parametrize("passed", [True, False])
def test_the_log_follower_sends_no_line_of_a_unit_answered_by_a_pass_and_says_how_many(
    tmp_path: Path, passed: bool
) -> None:
    """A unit answered by a pass writes its header and one line saying so: neither is forwarded (on click a no-op
    drive sent 500 records of them); the gate's end says how many, in one line. A unit that ran, or one that
    failed before and was not run again, is forwarded as before; so is output that reads like a unit's header."""
    from types import SimpleNamespace

    from milepost.flows.gate_task import _Watched
    from milepost.gates.command import command_header
    from milepost.gates.outcome import CachedFrom, Outcome
    from milepost.gates.unit_runs import _reused
    from milepost.gates.units import unit_command
    from milepost.graph import GateCommand

    step = GateCommand(name="pytest", run="pytest -q {file}", each=["tests/a.py", "tests/b.py", "tests/c.py"])
    a, b, c = (unit_command(step, f) for f in step.each)
    log = tmp_path / "attempt-1.log"
    origin = CachedFrom(item=1, milestone="m", attempt=3)
    written: list[str] = []
    _reused(a, "tests/a.py", "d" * 64, Outcome.PASSED, origin, written.append)
    _reused(c, "tests/c.py", "e" * 64, Outcome.FAILED, origin, written.append)
    echo = command_header(a)  # (printed by b's test as output: output)
    log.write_text(written[0] + command_header(b) + "1 passed\n" + echo + "done\n" + written[1])
    sent: list[str] = []
    logger = SimpleNamespace(info=sent.append, warning=sent.append)
    spec = SimpleNamespace(commands=[step], log_path=str(log), stop_file=str(tmp_path / "stop"), driver={})
    _Watched(spec, logger, 100).finish(passed)  # type: ignore[arg-type]
    assert sent == [
        command_header(b).rstrip("\n"),
        "1 passed",
        echo.rstrip("\n"),
        "done",
        command_header(c).rstrip("\n"),
        written[1].split("\n")[1],
        f"milepost: 1 unit answered by passes, not run again (the gate's log: {log})",
    ]
    assert written[1].split("\n")[1].startswith("milepost: failed as item 1 'm' attempt 3")


@pytest.mark.parametrize("as_json", [False, True])
def test_an_interrupted_drive_says_what_it_did_and_what_is_left(
    cli: CLI, workspace: Path, prefect_api: str, as_json: bool
) -> None:
    """Ctrl-C during b's gate: exit 130, and first the summary, as a drive
    that ended says it: a done, b ready again, c waiting on b (a new user had
    only "milepost: error: interrupted" to go on)."""
    import json

    marker = workspace / "b-started"
    (workspace / "plan.yaml").write_text(
        "objective: stopped\nmilestones:\n"
        "  - {name: a, gate: 'true'}\n"
        f"  - {{name: b, deps: [a], gate: 'touch {marker}; sleep 60'}}\n"
        "  - {name: c, deps: [b], gate: 'true'}\n"
    )
    cli("plan", "apply", "plan.yaml", check=True)
    proc = cli.popen(*(["--json"] if as_json else []), "drive")
    out, err = ctrl_c_once(proc, marker.exists, "b's gate to start")
    assert proc.returncode == 130, (out, err)
    if as_json:
        lines = [json.loads(line) for line in out.splitlines() if line.strip()]
        finished = lines[-2]
        assert finished["event"] == "drive_finished" and finished["interrupted"] and not finished["ok"], finished
        assert lines[-1]["error"]["type"] == "interrupted"
        views = {m["name"]: (m["status"], m["view"]) for m in finished["milestones"]}
        assert views == {"a": ("done", "done"), "b": ("pending", "ready"), "c": ("pending", "blocked")}, views
    else:
        assert "not done: interrupted;" in out, out
        rows = {line.split()[1]: line.split()[2] for line in out.splitlines() if line[:2].strip() in ("1", "2", "3")}
        assert rows == {"a": "done", "b": "ready", "c": "blocked"}, out
        assert err.strip().splitlines()[-1] == "milepost: error: interrupted"

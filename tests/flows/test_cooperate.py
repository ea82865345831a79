"""Drivers cooperate: a drive with nothing it can run while other live
drivers hold its item's work waits for them (saying once what it waits on),
takes up what their gates unblock, and ends with the item's verdict. Real
``milepost drive`` processes on a real Prefect server, on SQLite and
PostgreSQL; every gate appends its milestone's name to a ledger, so the test
counts real gate executions."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import CLI, Postgres, wait_until
from tests.flows.conftest import api_post

pytestmark = pytest.mark.xdist_group("prefect")


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def shared(request: pytest.FixtureRequest, workspace: Path, tmp_path: Path) -> CLI:
    """The CLI (real processes) in a workspace whose store is a SQLite file or a PostgreSQL database."""
    env = {}
    if request.param == "postgresql":
        pg: Postgres = request.getfixturevalue("postgres")
        env["MILEPOST_DB"] = pg.create_db(f"mp_coop_{abs(hash(tmp_path)) % 10**8}")
    cli = CLI(workspace, env)
    cli("init", check=True)
    return cli


class Driver:
    """A ``milepost drive`` process, its output in a file (a pipe nobody reads would fill up)."""

    def __init__(self, cli: CLI, log: Path, *args: str) -> None:
        self.log = log
        with log.open("w") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "milepost", *args],
                cwd=cli.cwd,
                env=cli.env,
                stdout=out,
                stderr=subprocess.STDOUT,
            )

    @property
    def out(self) -> str:
        return self.log.read_text(errors="replace")

    def says(self, text: str) -> bool:
        assert self.proc.poll() is None or text in self.out, f"it exited with {self.proc.returncode}:\n{self.out}"
        return text in self.out

    def events(self, kind: str) -> list[dict[str, Any]]:
        found = (json.loads(ln) for ln in self.out.splitlines() if ln.startswith("{"))
        return [e for e in found if e["event"] == kind]

    def wait(self, timeout: float = 180) -> int:
        return self.proc.wait(timeout=timeout)


@contextlib.contextmanager
def drivers(cli: CLI, tmp_path: Path, *argvs: list[str]) -> Iterator[list[Driver]]:
    n = len(list(tmp_path.glob("driver-*.log")))
    started = [Driver(cli, tmp_path / f"driver-{n + i}.log", *argv) for i, argv in enumerate(argvs)]
    try:
        yield started
    finally:
        for d in started:
            if d.proc.poll() is None:
                d.proc.kill()
                d.proc.wait()


def ledger(ws: Path) -> list[str]:
    f = ws / "ran.txt"
    return f.read_text().split() if f.exists() else []


def apply(cli: CLI, ws: Path, milestones: str) -> None:
    (ws / "plan.yaml").write_text(f"objective: cooperate\nmilestones:\n{milestones}")
    cli("plan", "apply", "plan.yaml", check=True)


@pytest.mark.timeout(400)
def test_a_second_and_third_driver_wait_take_up_what_is_unblocked_and_exit_0(
    prefect_api: str, shared: CLI, workspace: Path, tmp_path: Path
) -> None:
    """The first driver runs ``slow``; two more find nothing they can run and
    wait, each saying so once; when ``slow`` passes, its driver chains ``x``
    and a waiting one takes ``y``. Every gate runs once, all three exit 0."""
    cli = shared
    go = workspace / "go"
    apply(
        cli,
        workspace,
        f"  - {{name: slow, gate: 'echo slow >> ran.txt; while [ ! -e {go} ]; do sleep 0.1; done'}}\n"
        "  - {name: x, deps: [slow], gate: 'echo x >> ran.txt; sleep 1'}\n"
        "  - {name: y, deps: [slow], gate: 'echo y >> ran.txt; sleep 1'}\n",
    )
    with drivers(cli, tmp_path, ["drive"]) as (first,):
        wait_until(lambda: ledger(workspace) == ["slow"], 120, "slow to start", step=0.1, output=lambda: first.out)
        with drivers(cli, tmp_path, ["--json", "drive", "--wait-recorded"], ["drive"]) as (second, third):
            wait_until(lambda: second.says('"waiting_for_drivers"'), 120, "the second driver to wait", step=0.2)
            wait_until(lambda: third.says("wait   for other drivers: slow (pid "), 120, "the third to wait", step=0.2)
            time.sleep(2.0)  # four polls of each: what they wait on did not change, nothing more is said
            assert [d.proc.poll() for d in (first, second, third)] == [None, None, None]
            go.touch()
            codes = [first.wait(), second.wait(), third.wait()]
    assert codes == [0, 0, 0], "\n---\n".join(d.out for d in (first, second, third))
    assert sorted(ledger(workspace)) == ["slow", "x", "y"]  # no gate ran twice
    waits = second.events("waiting_for_drivers")
    assert waits[0]["milestones"] == ["slow"] and waits[0]["holders"]["slow"].startswith("drive:")
    assert [w["milestones"] for w in waits].count(["slow"]) == 1  # said once while it did not change
    assert third.out.count("for other drivers: slow (") == 1
    # The first driver chained x with slow's record; a waiting driver took y.
    by_waiting = {e["milestone"] for e in second.events("gate_finished")} | {
        name for name in ("x", "y") if f"done   {name} (attempt 1" in third.out
    }
    assert by_waiting == {"y"} and "done   x (attempt 1" in first.out
    finished = second.events("drive_finished")[-1]
    assert finished["ok"] is True and finished["message"] == "all 3 milestones are done"
    assert "all 3 milestones are done" in third.out
    # The waiting driver's flow run: the gate it ran, and those another driver proved meanwhile.
    states = {
        t["name"]: t["state"]["name"]
        for t in api_post(prefect_api, "/task_runs/filter", {"flow_runs": {"id": {"any_": [finished["flow_run_id"]]}}})
    }
    ran_here = {e["milestone"] for e in second.events("gate_finished")}  # y, or nothing (the third took it)
    assert states == {n: "Completed" if n in ran_here else "Done elsewhere" for n in ("slow", "x", "y")}
    assert {m["name"]: m["status"] for m in cli.json("list")["milestones"]} == dict.fromkeys(["slow", "x", "y"], "done")


@pytest.mark.timeout(300)
def test_a_waiting_driver_ends_with_the_items_verdict_when_the_other_fails(
    prefect_api: str, shared: CLI, workspace: Path, tmp_path: Path
) -> None:
    """The gate the other driver runs fails with its budget spent: the waiting
    driver ends too, exit 1 naming it stuck, and does not run it again."""
    cli = shared
    wait = f"while [ ! -e {workspace / 'go'} ]; do sleep 0.1; done"
    apply(
        cli,
        workspace,
        f"  - {{name: bad, retries: 0, gate: 'echo bad >> ran.txt; {wait}; exit 1'}}\n"
        "  - {name: after, deps: [bad], gate: 'echo after >> ran.txt'}\n",
    )
    with drivers(cli, tmp_path, ["drive"]) as (first,):
        wait_until(lambda: ledger(workspace) == ["bad"], 120, "bad to start", step=0.1, output=lambda: first.out)
        with drivers(cli, tmp_path, ["--json", "drive"]) as (second,):
            wait_until(lambda: second.says('"waiting_for_drivers"'), 120, "the second driver to wait", step=0.2)
            (workspace / "go").touch()
            codes = [first.wait(), second.wait()]
    assert codes == [1, 1], first.out + second.out
    assert ledger(workspace) == ["bad"]
    assert second.events("gate_started") == []
    finished = second.events("drive_finished")[-1]
    assert finished["ok"] is False and finished["message"].startswith("stuck: bad (blocks after)")


@pytest.mark.timeout(300)
def test_a_waiting_driver_reclaims_the_lease_of_a_driver_that_died(
    prefect_api: str, cli: CLI, workspace: Path, tmp_path: Path
) -> None:
    """While a driver waits, the one it waits on is killed (SIGKILL, on this
    machine): the waiting driver reclaims its lease at once (its process is
    proven gone), records the interrupted attempt and runs the gate itself."""
    marker = workspace / "started"
    gate = f"echo slow >> ran.txt; if [ -e {marker} ]; then exit 0; fi; echo $$ > {marker}; sleep 60"
    apply(cli, workspace, f"  - name: slow\n    gate: '{gate}'\n")
    with drivers(cli, tmp_path, ["drive"]) as (first,):
        wait_until(marker.exists, 120, f"{marker} to appear", step=0.1, output=lambda: first.out)
        with drivers(cli, tmp_path, ["drive"]) as (second,):
            wait_until(lambda: second.says("for other drivers: slow"), 120, "the second driver to wait", step=0.2)
            first.proc.kill()
            first.wait()
            assert second.wait() == 0, second.out
    assert f"reclaimed slow: lease of pid {first.proc.pid} on {socket.gethostname()} " in second.out
    runs = cli.json("runs", "slow")["runs"]
    assert [r["outcome"] for r in runs] == ["interrupted", "passed"]
    assert ledger(workspace) == ["slow", "slow"]  # the killed attempt and the waiting driver's own
    with contextlib.suppress(ProcessLookupError, ValueError):
        os.kill(int(marker.read_text()), signal.SIGKILL)  # (stopped by the reclaim already)


@pytest.mark.timeout(300)
def test_a_waiting_driver_leaves_a_fix_and_its_retry_to_the_driver_that_failed(
    prefect_api: str, cli: CLI, workspace: Path, tmp_path: Path
) -> None:
    """The other driver's gate fails and its fix hook runs (holding no lease):
    the waiting driver does not start the milestone's next attempt beside the
    fix; the driver that failed it retries it after its fix, once."""
    wait = f"while [ ! -e {workspace / 'go'} ]; do sleep 0.1; done"
    apply(
        cli,
        workspace,
        f"  - {{name: flaky, retries: 2, fix: 'sleep 2; touch fixed; echo fix >> ran.txt',"
        f" gate: 'echo flaky >> ran.txt; {wait}; test -e fixed'}}\n",
    )
    with drivers(cli, tmp_path, ["drive"]) as (first,):
        wait_until(lambda: ledger(workspace) == ["flaky"], 120, "flaky to start", step=0.1, output=lambda: first.out)
        with drivers(cli, tmp_path, ["--json", "drive"]) as (second,):
            wait_until(lambda: second.says('"waiting_for_drivers"'), 120, "the second driver to wait", step=0.2)
            (workspace / "go").touch()
            codes = [first.wait(), second.wait()]
    assert codes == [0, 0], first.out + second.out
    assert ledger(workspace) == ["flaky", "fix", "flaky"]  # attempt 1, its fix, attempt 2: nothing beside the fix
    assert second.events("gate_started") == []
    holders = [e["holders"]["flaky"] for e in second.events("waiting_for_drivers")]
    assert holders[0].startswith("drive:") and any(h.endswith(", fixing it") for h in holders), holders
    assert [r["outcome"] for r in cli.json("runs", "flaky")["runs"]] == ["failed", "passed"]


@pytest.mark.timeout(300)
def test_a_driver_waits_only_for_work_of_its_until_scope(
    prefect_api: str, cli: CLI, workspace: Path, tmp_path: Path
) -> None:
    """``--until x`` does not wait for a gate outside its scope (it ends once
    x is done, while that gate still runs); ``--until z`` waits for the gate
    z depends on, which the other driver runs, then runs z itself and ends 0."""
    go = workspace / "go"
    apply(
        cli,
        workspace,
        f"  - {{name: slow, gate: 'echo slow >> ran.txt; while [ ! -e {go} ]; do sleep 0.1; done'}}\n"
        "  - {name: x, gate: 'echo x >> ran.txt'}\n"
        "  - {name: z, deps: [slow], gate: 'echo z >> ran.txt; sleep 1'}\n",
    )
    with drivers(cli, tmp_path, ["drive", "--until", "slow"]) as (first,):
        wait_until(lambda: ledger(workspace) == ["slow"], 120, "slow to start", step=0.1, output=lambda: first.out)
        with drivers(cli, tmp_path, ["--json", "drive", "--until", "x"], ["--json", "drive", "--until", "z"]) as (
            only_x,
            to_z,
        ):
            assert only_x.wait() == 0, only_x.out
            assert first.proc.poll() is None and ledger(workspace) == ["slow", "x"]  # slow still runs
            assert only_x.events("waiting_for_drivers") == []
            wait_until(lambda: to_z.says('"waiting_for_drivers"'), 120, "--until z to wait", step=0.2)
            go.touch()
            codes = [first.wait(), to_z.wait()]
    assert codes == [0, 0], first.out + to_z.out
    assert ledger(workspace) == ["slow", "x", "z"]
    assert [e["milestone"] for e in to_z.events("gate_finished")] == ["z"]  # first's --until ends at slow
    assert to_z.events("drive_finished")[-1]["message"] == "z and the milestone it depends on are done"

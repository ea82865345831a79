"""A milestone's gate never runs twice at once, and a passed gate never passes
again, when the process running it (``milepost done``) dies or freezes: the
next ``done`` reclaims the expired lease, fences the earlier attempt (kills
what is left of it on this machine) and records it. Real CLI processes, real
signals, a gate that keeps a ledger (tests/ledger.py)."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from tests.conftest import CLI, MovableClock, wait_until
from tests.ledger import Ledger, gate_command, write_gate

TTL = "1"


@pytest.fixture
def setup(cli: CLI, workspace: Path) -> Iterator[tuple[CLI, Ledger, list[subprocess.Popen[str]]]]:
    gate = write_gate(workspace)
    ledger = Ledger(workspace / "ledger")
    cli("item", "create", "fencing", check=True)
    procs: list[subprocess.Popen[str]] = []
    yield cli, ledger, procs
    for p in procs:
        if p.poll() is None:
            os.kill(p.pid, signal.SIGCONT)
            p.kill()
        p.communicate()
    _ = gate


def add(cli: CLI, ledger: Ledger, name: str, seconds: float) -> None:
    gate = cli.cwd / "gate.sh"
    cli("add", name, "--gate", gate_command(gate, ledger.path, seconds), check=True)
    cli("start", name, check=True)


def runs(cli: CLI, name: str) -> list[tuple[int, str]]:
    return [(r["attempt"], r["outcome"]) for r in cli.json("runs", name)["runs"]]


def test_a_killed_done_leaves_a_lease_the_next_done_fences_and_records(setup) -> None:  # type: ignore[no-untyped-def]
    """The lease (120 s) has not expired, but its holder died on this
    machine: the next ``done`` need not wait for it."""
    cli, ledger, procs = setup
    add(cli, ledger, "a", 3)
    first = cli.popen("done", "a")
    procs.append(first)
    wait_until(lambda: ledger.has("start", "a"))
    time.sleep(0.3)
    killed_at = datetime.now(UTC)
    first.kill()  # SIGKILL: no chance to record anything
    first.communicate()
    assert cli.json("list")["milestones"][0]["status"] == "in_progress"
    time.sleep(0.5)  # the next done comes later: the attempt is not dated from it
    r = cli("--json", "done", "a")
    assert r.code == 0, r.err
    assert runs(cli, "a") == [(1, "interrupted"), (2, "passed")]
    first_run = cli.json("runs", "a")["runs"][0]
    assert "lease of" in first_run["reason"] and "its process died" in first_run["reason"], first_run
    # It ran from its claim until its supervisor stopped it, when its driver died.
    assert datetime.fromisoformat(first_run["started_at"]) < killed_at - timedelta(seconds=0.25), first_run
    assert 0.25 <= first_run["duration"] < 3, first_run
    assert ledger.executions() == [("a", 1), ("a", 2)] and ledger.count("end")["a"] == 1
    assert ledger.overlaps() == []
    assert cli.json("list")["milestones"][0]["attempts"] == 1  # the interrupted attempt spent no budget


def test_a_live_holders_lease_is_not_taken_over_before_it_expires(setup) -> None:  # type: ignore[no-untyped-def]
    """A holder that is alive, even frozen, is not taken for dead: within
    its lease ``done`` is refused and nothing runs; woken, it finishes."""
    cli, ledger, procs = setup
    add(cli, ledger, "a", 1)
    first = cli.popen("done", "a")  # a lease of 120 s
    procs.append(first)
    wait_until(lambda: ledger.has("start", "a"))
    os.kill(first.pid, signal.SIGSTOP)
    try:
        refused = cli("done", "a")
    finally:
        os.kill(first.pid, signal.SIGCONT)
    assert refused.code == 2 and "already running" in refused.err, refused.err
    first.communicate(timeout=60)
    assert first.returncode == 0
    assert runs(cli, "a") == [(1, "passed")]
    assert ledger.executions() == [("a", 1)] and ledger.overlaps() == []


def test_a_frozen_dones_gate_is_killed_before_the_milestone_runs_again(setup, clock: MovableClock) -> None:  # type: ignore[no-untyped-def]
    cli, ledger, procs = setup
    add(cli, ledger, "a", 4)
    frozen = cli.popen("done", "a", MILEPOST_LEASE_TTL=TTL)
    procs.append(frozen)
    wait_until(lambda: ledger.has("start", "a"))
    os.kill(frozen.pid, signal.SIGSTOP)  # alive, holding its supervisor's pipe, renewing nothing
    clock.advance(1.5)  # past its lease, for the next done (this process's services)
    r = cli("--json", "done", "a", MILEPOST_LEASE_TTL=TTL)
    assert r.code == 0, r.err
    first_run = cli.json("runs", "a")["runs"][0]
    assert first_run["outcome"] == "interrupted" and "killed its process group" in first_run["reason"]
    os.kill(frozen.pid, signal.SIGCONT)
    out, err = frozen.communicate(timeout=60)
    # The woken process records nothing: the lease had passed on.
    assert "this outcome is not applied" in out, (out, err)
    assert runs(cli, "a") == [(1, "interrupted"), (2, "passed")]
    assert ledger.executions() == [("a", 1), ("a", 2)] and ledger.overlaps() == []
    assert ledger.count("end")["a"] == 1


def test_a_gate_that_passed_after_its_driver_froze_is_not_run_again(setup, clock: MovableClock) -> None:  # type: ignore[no-untyped-def]
    cli, ledger, procs = setup
    add(cli, ledger, "a", 0.5)
    frozen = cli.popen("done", "a", MILEPOST_LEASE_TTL=TTL)
    procs.append(frozen)
    wait_until(lambda: ledger.has("start", "a"))
    os.kill(frozen.pid, signal.SIGSTOP)
    wait_until(lambda: ledger.has("end", "a"))  # the gate passed; its driver could not record it
    clock.advance(1.5)  # past its lease
    r = cli("--json", "done", "a", MILEPOST_LEASE_TTL=TTL)
    assert r.code == 0, r.err
    data = r.data
    assert data["passed"] is True and data["milestone"]["status"] == "done"
    assert "recovered from attempt-1.log" in data["gate_run"]["reason"]
    os.kill(frozen.pid, signal.SIGCONT)
    frozen.communicate(timeout=60)
    assert runs(cli, "a") == [(1, "passed")]
    assert ledger.executions() == [("a", 1)]  # ran once, passed once
    assert cli.json("list")["milestones"][0]["status"] == "done"

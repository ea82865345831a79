"""The crash test: several drivers on one work item, killed with SIGKILL at
random moments and at chosen ones (inside a claim's transaction, right after
a claim, right after a gate started, inside the transaction recording an
attempt, right after taking over a dead driver's lease), with gates longer
than the lease, on SQLite and on PostgreSQL.

After each trial a clean drive finishes the item; then, for every milestone:
its gate passed exactly once (one ``end`` line in the ledger, one passed run
in the store, the same attempt), no two executions overlapped (a second
execution finds the first one's lock held), and every execution is an
attempt in the store. Figures per backend are printed at the end
(``pytest -s``) and, with ``MILEPOST_CRASH_REPORT=FILE``, written as JSON.
``MILEPOST_CRASH_TRIALS`` sets the trials per backend (default 10), and
``MILEPOST_CRASH_SEED`` the random choices."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import CLI, Postgres
from tests.ledger import Ledger, gate_command, write_gate

TRIALS = int(os.environ.get("MILEPOST_CRASH_TRIALS", "10"))
TTL = "1"
GATE_SECONDS = 1.5  # longer than the lease: only renewals keep a live driver's claim
DRIVERS = 3
CHAOS_SECONDS = 7.0
CRASH_POINTS = ["claim:1", "claim:2", "claimed:1", "gate:1", "gate:2", "record:1", "record:2", "reclaim:1"]
PLAN = """objective: crash trial {n}
milestones:
  - {{name: a, gate: "{gate}"}}
  - {{name: b, gate: "{gate}"}}
  - {{name: c, deps: [a], gate: "{gate}"}}
  - {{name: d, deps: [a, b], gate: "{gate}"}}
  - {{name: e, deps: [c, d], gate: "{gate}"}}
"""
NAMES = ["a", "b", "c", "d", "e"]
# Its own group: the two backends run one after the other on one xdist
# worker (with its own Prefect server), beside the other Prefect tests.
pytestmark = pytest.mark.xdist_group("crash")


def spawn_driver(cli: CLI, log: Path, item: str, env: dict[str, str]) -> subprocess.Popen[str]:
    with open(log, "a") as out:  # not a pipe: nobody reads it while the driver runs
        return subprocess.Popen(
            [sys.executable, "-m", "milepost", "drive", item, "--max-parallel", "2"],
            cwd=cli.cwd,
            env={**cli.env, **env},
            stdout=out,
            stderr=subprocess.STDOUT,
            text=True,
        )


def _stop(p: subprocess.Popen[str]) -> None:
    if p.poll() is None:
        p.kill()
    p.communicate()


def run_trial(cli: CLI, ws: Path, n: int, rng: random.Random, figures: Counter[str]) -> None:
    ledger = Ledger(ws / f"ledger-{n}")
    gate = gate_command(ws / "gate.sh", ledger.path, GATE_SECONDS)
    (ws / f"plan-{n}.yaml").write_text(PLAN.format(n=n, gate=gate))
    item = str(cli.json("plan", "apply", f"plan-{n}.yaml")["id"])
    drivers: list[subprocess.Popen[str]] = []
    t0 = time.monotonic()
    next_kill = t0 + rng.uniform(1.5, 3.0)
    try:
        while time.monotonic() - t0 < CHAOS_SECONDS:
            for p in [p for p in drivers if p.poll() is not None]:
                if p.returncode == -signal.SIGKILL:
                    figures["crash points hit"] += 1
                drivers.remove(p)
                p.communicate()
            while len(drivers) < DRIVERS:
                env = {"MILEPOST_LEASE_TTL": TTL}
                if rng.random() < 0.5:
                    env["MILEPOST_CRASH_AT"] = rng.choice(CRASH_POINTS)
                drivers.append(spawn_driver(cli, ws / f"drivers-{n}.log", item, env))
                figures["drivers"] += 1
            if time.monotonic() >= next_kill:
                victim = rng.choice(drivers)
                if victim.poll() is None:
                    victim.kill()  # SIGKILL, the driver process only
                    victim.communicate()
                    drivers.remove(victim)
                    figures["random kills"] += 1
                next_kill = time.monotonic() + rng.uniform(0.3, 2.0)
            time.sleep(0.05)
    finally:
        for p in drivers:
            _stop(p)
    # Let every lease of the dead expire, then a clean drive finishes the item.
    time.sleep(float(TTL) + 0.3)
    clean = cli("--json", "drive", item, MILEPOST_LEASE_TTL=TTL, timeout=300)
    assert clean.code == 0, (n, clean.err, clean.out[-2000:])
    check(cli, item, ledger, n, figures)


def check(cli: CLI, item: str, ledger: Ledger, n: int, figures: Counter[str]) -> None:
    listed = cli.json("list", "--item", item)["milestones"]
    assert [m["status"] for m in listed] == ["done"] * len(NAMES), (n, listed)
    ends = ledger.count("end")
    executions = ledger.executions()
    figures["trials"] += 1
    figures["executions"] += len(executions)
    figures["overlaps"] += len(ledger.overlaps())
    assert ledger.overlaps() == [], (n, ledger.lines())
    for name in NAMES:
        runs = cli.json("runs", name, "--item", item)["runs"]
        passed = [r["attempt"] for r in runs if r["outcome"] == "passed"]
        assert ends[name] == 1, (n, name, ledger.lines())  # the gate passed exactly once
        assert len(passed) == 1, (n, name, runs)
        ended = [a for kind, m, a in ledger.lines() if kind == "end" and m == name]
        assert ended == passed, (n, name, ended, runs)
        recorded = {r["attempt"] for r in runs}
        mine = [a for m, a in executions if m == name]
        assert len(mine) == len(set(mine)), (n, name, mine)  # no attempt number ran twice
        lost = [a for a in mine if a not in recorded]
        figures["lost"] += len(lost)
        assert lost == [], (n, name, mine, runs)  # every execution is an attempt in the store
        figures["attempts recorded"] += len(runs)
        figures["interrupted attempts"] += sum(1 for r in runs if r["outcome"] == "interrupted")
        figures["recovered attempts"] += sum(1 for r in runs if "recovered from" in r["reason"])


def report(backend: str, figures: Counter[str]) -> None:
    line = f"crash test [{backend}]: " + ", ".join(f"{k} {v}" for k, v in sorted(figures.items()))
    print(line)
    out = os.environ.get("MILEPOST_CRASH_REPORT")
    if out:
        path = Path(out)
        data: dict[str, Any] = json.loads(path.read_text()) if path.exists() else {}
        data[backend] = dict(figures)
        path.write_text(json.dumps(data, indent=2, sort_keys=True))


@pytest.mark.timeout(120 + 60 * TRIALS)
@pytest.mark.parametrize("backend", ["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def test_no_driver_death_runs_a_gate_twice_or_loses_an_attempt(
    prefect_api: str, backend: str, workspace: Path, request: pytest.FixtureRequest
) -> None:
    env: dict[str, str] = {}
    if backend == "postgresql":
        pg: Postgres = request.getfixturevalue("postgres")
        env["MILEPOST_DB"] = pg.create_db("mp_crash")
    cli = CLI(workspace, env)
    cli("init", check=True)
    write_gate(workspace)
    rng = random.Random(int(os.environ.get("MILEPOST_CRASH_SEED", "20261130")))
    figures: Counter[str] = Counter()
    for n in range(1, TRIALS + 1):
        run_trial(cli, workspace, n, rng, figures)
    report(backend, figures)
    assert figures["trials"] == TRIALS and figures["overlaps"] == 0 and figures["lost"] == 0
    assert figures["random kills"] + figures["crash points hit"] >= TRIALS  # every trial killed drivers

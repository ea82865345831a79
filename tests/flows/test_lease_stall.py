"""A driver that stalls between claiming a gate and starting it never runs
that gate beside another driver's run of it.

Two ways to stall, both with a lease shorter than the stall:
- its loop is slow (load, a long proof read) while the process lives: its
  lease is renewed from the claim on, so a second driver finds it live and
  waits; the gate runs once, under the first driver;
- the whole process is frozen (SIGSTOP, as a suspended laptop or a VM
  pause): the lease expires, a second driver takes it over, records the
  attempt interrupted and runs the next; the first, thawed, asks for its
  lease right before its gate starts, finds it gone and starts nothing.

Both drive with ``--until``, which keeps the first gate in the loop (no
early start before Prefect is imported, flows/early.py, whose gate starts
right after its claim); a last test kills a driver right after that early
claim. The gate keeps a ledger (tests/ledger.py): every execution and any overlap."""

from __future__ import annotations

import signal
import time
from pathlib import Path

import pytest

from tests.conftest import CLI, Postgres
from tests.ledger import Ledger, gate_command, write_gate

TTL = "1"
PLAN = """objective: a stalled driver
milestones:
  - {{name: a, gate: "{gate}"}}
"""
pytestmark = [pytest.mark.prefect, pytest.mark.xdist_group("crash")]


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def cli(prefect_api: str, workspace: Path, request: pytest.FixtureRequest) -> CLI:
    env: dict[str, str] = {"MILEPOST_LEASE_TTL": TTL}
    if request.param == "postgresql":
        pg: Postgres = request.getfixturevalue("postgres")
        env["MILEPOST_DB"] = pg.create_db("mp_stall")
    c = CLI(workspace, env)
    c("init", check=True)
    return c


def _plan(cli: CLI, ws: Path, seconds: float) -> tuple[str, Ledger]:
    ledger = Ledger(ws / "ledger")
    (ws / "plan.yaml").write_text(PLAN.format(gate=gate_command(write_gate(ws), ledger.path, seconds)))
    return str(cli.json("plan", "apply", "plan.yaml")["id"]), ledger


def _until(what: str, ok: object, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not ok():  # type: ignore[operator]
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def _status(cli: CLI, item: str) -> str:
    return str(cli.json("list", "--item", item)["milestones"][0]["status"])


def _stopped(pid: int) -> bool:
    stat = Path(f"/proc/{pid}/stat").read_text()
    return stat[stat.rindex(")") + 2] == "T"


def _runs(cli: CLI, item: str) -> list[tuple[int, str]]:
    return [(r["attempt"], r["outcome"]) for r in cli.json("runs", "a", "--item", item)["runs"]]


def test_a_slow_driver_keeps_its_lease_from_the_claim_on(cli: CLI, workspace: Path) -> None:
    item, ledger = _plan(cli, workspace, 0.5)
    go = workspace / "go"
    first = cli.popen("drive", item, "--until", "a", MILEPOST_STALL_AT=f"claimed:{go}")  # claimed, then waits for go
    second = None
    try:
        _until("the first driver's claim", lambda: _status(cli, item) == "in_progress")
        second = cli.popen("drive", item)
        assert second.stdout is not None
        seen = []
        while not any("for other drivers" in line for line in seen):  # it found the lease live: it waits
            line = second.stdout.readline()
            assert line, ("the second driver ended without waiting", seen, second.stderr and second.stderr.read())
            seen.append(line)
        time.sleep(3 * float(TTL))  # three leases' time between the claim and the gate: only renewals keep it
        go.touch()
        out, _ = first.communicate(timeout=120)
        rest, err = second.communicate(timeout=120)
    finally:
        for p in (first, second):
            if p is not None and p.poll() is None:
                p.kill()
                p.communicate()
    assert first.returncode == 0, out
    assert second.returncode == 0, ("".join(seen) + rest, err)
    assert ledger.executions() == [("a", 1)], ledger.lines()  # once, by the driver that claimed it
    assert ledger.overlaps() == []
    assert _runs(cli, item) == [(1, "passed")]


def test_a_frozen_driver_thawed_after_a_takeover_starts_nothing(cli: CLI, workspace: Path) -> None:
    item, ledger = _plan(cli, workspace, 0.5)
    first = cli.popen("drive", item, "--until", "a", MILEPOST_CRASH_AT="claimed:1", MILEPOST_CRASH_SIGNAL="SIGSTOP")
    try:
        _until("the first driver frozen after its claim", lambda: _stopped(first.pid))
        time.sleep(float(TTL) + 0.3)  # its lease expires (nothing of it runs to renew it)
        second = cli("drive", item, timeout=120)
        assert second.code == 0, second.err
        assert "lease of pid" in second.out and "expired" in second.out, second.out
        first.send_signal(signal.SIGCONT)
        out, _ = first.communicate(timeout=120)
    finally:
        if first.poll() is None:
            first.kill()
            first.communicate()
    assert ledger.executions() == [("a", 2)], (ledger.lines(), out)  # only the attempt of the driver that took over
    assert _runs(cli, item) == [(1, "interrupted"), (2, "passed")]
    assert _status(cli, item) == "done"
    assert "its lease passed to another driver" in out, out
    assert first.returncode == 0, out


def test_a_driver_killed_after_its_first_claim_before_prefect_loads(cli: CLI, workspace: Path) -> None:
    """Without ``--until`` the first claim is made before Prefect is imported
    (flows/early.py), and its crash point is there too: a driver killed
    (SIGKILL) right after that claim started no gate; once its lease expires
    the next drive takes the attempt over (interrupted, no budget spent) and
    runs the gate once."""
    item, ledger = _plan(cli, workspace, 0.2)
    first = cli.popen("drive", item, MILEPOST_CRASH_AT="claimed:1")
    out, err = first.communicate(timeout=120)
    assert first.returncode == -signal.SIGKILL, (first.returncode, out, err)
    assert ledger.executions() == [], ledger.lines()  # (killed before its gate started, not after)
    time.sleep(float(TTL) + 0.3)  # its lease expires
    second = cli("drive", item, timeout=120)
    assert second.code == 0, second.err
    assert ledger.executions() == [("a", 2)], ledger.lines()
    assert _runs(cli, item) == [(1, "interrupted"), (2, "passed")]
    assert _status(cli, item) == "done"

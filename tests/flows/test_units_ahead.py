"""Units run ahead of their gates in a real drive (the CLI in its own
process, a real Prefect server, SQLite): while a dependency's gate holds
one worker of ``--max-parallel 2``, the other runs the dependent's unit, and
the dependent's gate takes that run as its own. Every unit appends to a
ledger with the time it started, so the test counts real runs and sees
their order."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import CLI

pytestmark = pytest.mark.xdist_group("prefect")


def plan(ledger: Path, wait: float) -> str:
    # first's unit waits (up to ``wait`` s) for second's to have run: only a run ahead can end its wait early.
    seen = f"grep -q second {ledger} 2>/dev/null"
    slow = f"test -f {{file}} && echo first $(date +%s.%N) >> {ledger}"
    slow += f" && for i in $(seq {int(wait * 10)}); do {seen} && break; sleep 0.1; done"
    slow += f" && echo first-end $(date +%s.%N) >> {ledger}"
    quick = f"test -f {{file}} && echo second $(date +%s.%N) >> {ledger}"
    return json.dumps(
        {
            "objective": "ahead",
            "milestones": [
                {
                    "name": "first",
                    "gate": [{"name": "slow", "run": slow, "each": ["src/a.py"]}],
                    "inputs": ["src/a.py"],
                },
                {
                    "name": "second",
                    "deps": ["first"],
                    "inputs": ["src/b.py"],
                    "gate": [{"name": "quick", "run": quick, "each": ["src/b.py"]}],
                },
            ],
        }
    )


def ledger_rows(ledger: Path) -> list[tuple[str, float]]:
    return [(w, float(t)) for w, t in (line.split() for line in ledger.read_text().splitlines())]


@pytest.fixture
def ahead_cli(workspace: Path, tmp_path: Path) -> tuple[CLI, Path]:
    (workspace / "src").mkdir()
    (workspace / "src/a.py").write_text("a = 1\n")
    (workspace / "src/b.py").write_text("b = 1\n")
    ledger = tmp_path / "ledger.txt"
    cli = CLI(workspace)
    cli("init", check=True)
    return cli, ledger


def apply(cli: CLI, ledger: Path, wait: float) -> None:
    (cli.cwd / "plan.yaml").write_text(plan(ledger, wait))
    cli("plan", "apply", "plan.yaml", check=True)


@pytest.mark.timeout(300)
def test_a_dependents_unit_runs_ahead_while_its_dependency_runs(prefect_api: str, ahead_cli: tuple[CLI, Path]) -> None:
    cli, ledger = ahead_cli
    apply(cli, ledger, wait=90)
    r = cli("drive", "--max-parallel", "2")
    assert r.code == 0, r.err + r.out
    rows = ledger_rows(ledger)
    assert [w for w, _ in rows].count("second") == 1  # once, whoever ran it
    started = dict(rows)
    assert started["second"] < started["first-end"]  # ran while first's gate ran, not after it
    run = cli.json("runs", "second")["runs"][-1]
    unit = run["commands"][0]
    assert unit["outcome"] == "passed" and "ran ahead of its gate" in unit["reason"]
    assert "ran ahead of this gate" in Path(run["log_path"]).read_text()
    # The dependency still gates its dependent: second's attempt began after first was done.
    assert [m["status"] for m in cli.json("list")["milestones"]] == ["done", "done"]


@pytest.mark.timeout(300)
def test_one_worker_runs_nothing_ahead(prefect_api: str, ahead_cli: tuple[CLI, Path]) -> None:
    cli, ledger = ahead_cli
    apply(cli, ledger, wait=2)
    r = cli("drive")
    assert r.code == 0, r.err + r.out
    started = dict(ledger_rows(ledger))
    assert started["second"] > started["first-end"]
    assert "ran ahead" not in json.dumps(cli.json("runs", "second"))

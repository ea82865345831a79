"""The proof bound to its inputs, end to end: a real git repository with a
small package and its tests, driven with the real CLI against a real Prefect
server, on SQLite and PostgreSQL. Every gate appends its milestone's name to
a ledger outside the workspace, so the test counts real gate executions."""

from __future__ import annotations

import json
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from tests.conftest import CLI, Postgres
from tests.flows.conftest import api_post

pytestmark = pytest.mark.xdist_group("prefect")

PACKAGE = {
    "pkg/__init__.py": "",
    "pkg/leaf.py": "def value():\n    return 1\n",
    "pkg/mid.py": "from pkg.leaf import value\n\n\ndef twice():\n    return 2 * value()\n",
    "pkg/top.py": "from pkg.mid import twice\n\n\ndef four():\n    return 2 * twice()\n",
    "pkg/other.py": "def alone():\n    return 7\n",
    "tests/test_leaf.py": "from pkg.leaf import value\n\n\ndef test_value():\n    assert value() == 1\n",
    "tests/test_mid.py": "from pkg.mid import twice\n\n\ndef test_twice():\n    assert twice() == 2\n",
    "tests/test_top.py": "from pkg.top import four\n\n\ndef test_four():\n    assert four() == 4\n",
    "tests/test_other.py": "from pkg.other import alone\n\n\ndef test_alone():\n    assert alone() == 7\n",
    ".gitignore": ".pytest_cache/\n",
}


def scaffold(cli: CLI, ledger: Path, objective: str) -> int:
    """``plan scaffold --apply``: a milestone per module, its gate running the
    tests that exercise it, its inputs its module, what that imports and its tests."""
    gate = f"echo $MILEPOST_MILESTONE >> {ledger} && {sys.executable} -m pytest -q -p no:cacheprovider {{tests}}"
    return int(cli.json("plan", "scaffold", "pkg", "--gate", gate, "--objective", objective, "--apply")["item"])


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def repo(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[Path, CLI]:
    root = tmp_path / "repo"
    for rel, text in PACKAGE.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    git = ["git", "-C", str(root), "-c", "user.email=t@t", "-c", "user.name=t"]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-qm", "a small package"], check=True)
    env = {}
    if request.param == "postgresql":
        pg: Postgres = request.getfixturevalue("postgres")
        env["MILEPOST_DB"] = pg.create_db(f"mp_proofs_{abs(hash(tmp_path)) % 10**8}")
    cli = CLI(root, env)
    cli("init", check=True)
    return root, cli


def task_states(api: str, out: str) -> dict[str, str]:
    """Task-run name -> state name of the flow run a drive printed."""
    flow_run = next(ln for ln in out.splitlines() if "flow run:" in ln).rsplit("/", 1)[1]
    got = api_post(api, "/task_runs/filter", {"flow_runs": {"id": {"any_": [flow_run]}}})
    return {t["name"]: t["state"]["name"] for t in got}


def ran(ledger: Path, since: int) -> list[str]:
    return ledger.read_text().split()[since:] if ledger.exists() else []


def views(cli: CLI, item: int | None = None) -> dict[str, str]:
    args = ["list"] + (["--item", str(item)] if item else [])
    return {m["name"]: m["view"] for m in cli.json(*args)["milestones"]}


@pytest.mark.timeout(1200)  # seven drives and two verifies, each a real process
def test_edit_break_fix_and_a_second_item(prefect_api: str, repo: tuple[Path, CLI], tmp_path: Path) -> None:
    root, cli = repo
    ledger = tmp_path / "ledger.txt"
    item = scaffold(cli, ledger, "prove pkg module by module")
    plan = {m["name"]: m for m in cli.json("list")["milestones"]}
    assert plan["pkg.mid"]["inputs"] == ["module:pkg.mid", "module:tests/test_mid.py", f"env:{sys.executable}"]
    files = ["pkg/__init__.py", "pkg/leaf.py", "pkg/mid.py", "tests/test_mid.py"]
    assert cli.json("inputs", "pkg.mid")["files"] == files
    assert plan["pkg.other"]["inputs"] == ["module:pkg.other", "module:tests/test_other.py", f"env:{sys.executable}"]
    leaf, mid, top, other = "pkg.leaf", "pkg.mid", "pkg.top", "pkg.other"

    # 1. A first drive proves everything.
    r = cli("drive")
    assert r.code == 0, r.err + r.out
    assert sorted(ran(ledger, 0)) == [leaf, mid, other, top]
    seen = len(ran(ledger, 0))

    # 2. Edit a leaf (behaviour kept): exactly the leaf and its importers are stale.
    (root / "pkg/leaf.py").write_text("def value():\n    return 3 - 2  # refactored\n")
    assert views(cli) == {"pkg": "done", leaf: "stale", mid: "stale", top: "stale", other: "done"}
    dry = cli.json("drive", "--dry-run")
    assert dry["order"] == [leaf, mid, top] and set(dry["stale"]) == {leaf, mid, top}
    assert dry["stale"][leaf]["changed"] == ["pkg/leaf.py"]
    r = cli("drive")
    assert r.code == 0, r.err + r.out
    assert ran(ledger, seen) == [leaf, mid, top]  # re-proven in id order, nothing else
    seen += 3
    assert set(views(cli).values()) == {"done"}
    tries = {m["name"]: m["attempts"] for m in cli.json("list")["milestones"]}
    assert tries == {"pkg": 0, leaf: 1, mid: 1, top: 1, other: 1}  # a passing re-proof spends no budget

    # 3. Nothing stale: verify runs nothing.
    v = cli("--json", "verify")
    assert v.code == 0 and v.data["verified"] == [] and ran(ledger, seen) == []

    # 4. Break the leaf: one execution, its dependents wait behind it, skipped in JUnit.
    (root / "pkg/leaf.py").write_text("def value():\n    return 2\n")
    junit = tmp_path / "junit.xml"
    r = cli("drive", "--wait-recorded", "--junit", str(junit))
    assert r.code == 1
    assert ran(ledger, seen) == [leaf]
    seen += 1
    assert views(cli) == {"pkg": "done", leaf: "needs_fix", mid: "blocked", top: "blocked", other: "done"}
    assert "failed, inputs unchanged since (not retried until they change;" in r.out and f"{leaf} (attempt 3)" in r.out
    cases = {c.get("name"): c for c in ET.parse(junit).getroot().iter("testcase")}
    assert cases[leaf].find("failure") is not None and cases[other].find("failure") is None
    for name in (mid, top):
        skipped = cases[name].find("skipped")
        assert skipped is not None and cases[name].find("failure") is None
    assert f"blocked by {leaf} (needs_fix)" in (cases[mid].find("skipped").get("message") or "")  # type: ignore[union-attr]
    suite = ET.parse(junit).getroot()
    assert (suite.get("failures"), suite.get("skipped")) == ("1", "2")
    # In the Prefect UI: the failed re-proof, and the milestones behind it Blocked.
    states = task_states(prefect_api, r.out)
    assert states[leaf] == "Re-proof failed" and states[mid] == states[top] == "Blocked"
    assert states[other] == "Done earlier"

    # 5. No blind retries: the same inputs would fail the same way.
    r = cli("drive")
    assert r.code == 1 and ran(ledger, seen) == []
    assert "not retried until they change" in r.out
    v = cli("--json", "verify")  # the same answer without Prefect: still red, nothing run
    assert v.code == 1 and ran(ledger, seen) == []

    # 6. Fix it: the leaf is retried, then what waits behind it runs. (Put back
    # exactly as first proven, the files would match passed runs: cached, not run; and a comment alone
    # changes no block its units executed: those would be cached too.)
    (root / "pkg/leaf.py").write_text("def value():\n    return 5 - 4  # fixed\n")
    r = cli("drive")
    assert r.code == 0, r.err + r.out
    assert ran(ledger, seen) == [leaf, mid, top]
    seen += 3

    # 7. A second item scaffolded on unchanged code runs no gate: every attempt is cached.
    second = scaffold(cli, ledger, "the same plan again")
    assert second != item
    r = cli("--json", "drive", "--wait-recorded")
    assert r.code == 0, r.err
    assert ran(ledger, seen) == []
    finished = [e for e in map(json.loads, r.out.splitlines()) if e["event"] == "drive_finished"][-1]
    assert finished["gate_runs"] == 0 and finished["cached"] == 4
    runs = cli.json("runs", leaf)["runs"]
    assert [x["outcome"] for x in runs] == ["cached"] and runs[0]["cached_from"]["item"] == item
    flow_run = finished["flow_run_id"]
    got = api_post(prefect_api, "/task_runs/filter", {"flow_runs": {"id": {"any_": [flow_run]}}})
    assert {t["name"]: t["state"]["name"] for t in got if t["name"] != "pkg"} == dict.fromkeys(
        [leaf, mid, other, top], "Cached"
    )


@pytest.mark.timeout(600)
def test_cache_false_runs_its_units_in_a_drive(prefect_api: str, repo: tuple[Path, CLI], tmp_path: Path) -> None:
    """A drive's book has a pass of the unit (another milestone ran it, in this drive and in the
    store): a ``cache: false`` milestone's gate runs it all the same, and no outcome reads cached."""
    root, cli = repo
    ledger = tmp_path / "ledger.txt"
    step = f'{{name: t, run: "echo {{file}} >> {ledger} && grep -q def {{file}}", each: [tests/test_leaf.py]}}'
    (root / "plan.yaml").write_text(
        "objective: cache off\nmilestones:\n"
        f'  - {{name: shared, gate: [{step}], inputs: ["module:tests/test_leaf.py"]}}\n'
        f'  - {{name: live, deps: [shared], cache: false, gate: [{step}], inputs: ["module:tests/test_leaf.py"]}}\n'
    )
    cli("plan", "apply", "plan.yaml", check=True)
    r = cli("drive")
    assert r.code == 0, r.err + r.out
    assert ran(ledger, 0) == ["tests/test_leaf.py", "tests/test_leaf.py"]  # shared ran it, and live again
    (unit,) = cli.json("runs", "live")["runs"][-1]["commands"]
    assert unit["outcome"] == "passed" and unit["cached_from"] is None

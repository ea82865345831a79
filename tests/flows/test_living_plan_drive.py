"""A plan revised while a drive runs it, on a real Prefect server: the drive
sees the revision at its next pick (a new milestone runs in it, a changed
one is proven again, a removed one is never started, no gate runs twice),
and a revision touching the running milestone is refused; the next drive's
flow run draws the revised DAG."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import InProcessCLI, wait_until
from tests.flows.conftest import api_post

pytestmark = pytest.mark.xdist_group("prefect")


@pytest.mark.parametrize("store", ["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def test_a_revision_during_a_drive_is_seen_at_its_next_pick(
    prefect_api: str, store: str, request: pytest.FixtureRequest, workspace: Path
) -> None:
    env = {}
    if store == "postgresql":
        env["MILEPOST_DB"] = request.getfixturevalue("postgres").create_db("mp_living_drive")
    cli = InProcessCLI(workspace, env)
    cli("init", check=True)
    marker, release = workspace / "started", workspace / "release"
    hold = f"touch {marker}; while [ ! -e {release} ]; do sleep 0.1; done; echo slow >> ran.txt"
    (workspace / "plan.yaml").write_text(
        "objective: revised while driven\nmilestones:\n"
        "  - {name: a, gate: 'echo a >> ran.txt'}\n"
        f"  - {{name: slow, gate: '{hold}'}}\n"
        "  - {name: c, deps: [slow], gate: 'echo c >> ran.txt'}\n"
    )
    (workspace / "revised.yaml").write_text(
        "objective: revised while driven\nmilestones:\n"
        "  - {name: a, gate: 'echo a2 >> ran.txt'}\n"
        f"  - {{name: slow, gate: '{hold}'}}\n"
        "  - {name: n, gate: 'echo n >> ran.txt'}\n"
    )
    cli("plan", "apply", "plan.yaml", check=True)
    drive = cli.popen("drive")
    try:
        wait_until(marker.exists, 120, f"{marker} to appear (slow's gate running)", step=0.1)
        touching = (workspace / "revised.yaml").read_text().replace("done; echo slow", "done; echo SLOW")
        (workspace / "touching.yaml").write_text(touching)
        r = cli("plan", "apply", "touching.yaml", "--item", "1")
        assert r.code == 2 and "cannot change gate of 'slow' runs attempt 1 by " in r.err, r.err
        r = cli("--json", "plan", "apply", "revised.yaml", "--item", "1")
        assert r.code == 0, r.err
        assert (r.data["added"], r.data["removed"], list(r.data["stale"])) == (["n"], ["c"], ["a"])
        release.touch()
        out, err = drive.communicate(timeout=180)
    finally:
        release.touch()
        if drive.returncode is None:
            drive.kill()
            drive.communicate()
    assert drive.returncode == 0, err + out
    ran = (workspace / "ran.txt").read_text().split()
    assert ran == ["a", "slow", "a2", "n"], ran  # c never started; a proven again once, n run in this drive
    shown = {m["name"]: m["status"] for m in cli.json("list")["milestones"]}
    assert shown == {"a": "done", "slow": "done", "n": "done"}
    assert (workspace / ".milepost" / "milepost.db").exists() is (store == "sqlite")  # the store it says
    # The next drive's flow run draws the revised DAG: n (added) is in it, c (removed) is not.
    cli("edit", "n", "--gate", "echo n2 >> ran.txt", check=True)  # (something for the next drive to run)
    r = cli("--json", "drive", "--wait-recorded")
    assert r.code == 0, r.err + r.out
    flow_run = json.loads(r.out.strip().splitlines()[-1])["flow_run_id"]
    runs = api_post(prefect_api, "/task_runs/filter", {"flow_runs": {"id": {"any_": [flow_run]}}})
    drawn = {t["name"]: (t["state"]["name"], "milepost-plan-node" in t["tags"]) for t in runs}
    assert drawn == {"a": ("Done earlier", True), "slow": ("Done earlier", True), "n": ("Completed", False)}, drawn
    assert (workspace / "ran.txt").read_text().split() == [*ran, "n2"]


def test_a_scaffold_again_after_a_new_module_drives_only_its_gate(prefect_api: str, workspace: Path) -> None:
    from tests.test_scaffold import make_package

    cli = InProcessCLI(workspace)
    cli("init", check=True)
    make_package(workspace, "pk", {"": "", "a": "X = 1\n", "b": "from pk import a\n"})
    cli("plan", "scaffold", "pk", "--apply", check=True)

    def drive() -> dict:  # type: ignore[type-arg]
        r = cli("--json", "drive")
        assert r.code == 0, r.err + r.out
        return json.loads(r.out.strip().splitlines()[-1])

    assert drive()["gate_runs"] == 3
    make_package(workspace, "pk", {"c": "from pk import a\n"})  # a new module
    cli("plan", "scaffold", "pk", "--item", "1", "--apply", check=True)
    second = drive()
    assert (second["gate_runs"], second["cached"]) == (1, 0), second
    ran = {m["name"]: m["attempts"] for m in second["milestones"]}
    assert ran == {"pk": 1, "pk.a": 1, "pk.b": 1, "pk.c": 1}

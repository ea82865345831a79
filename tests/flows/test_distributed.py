"""The multi-machine path, for real: a PostgreSQL store shared by a planner
and by Prefect-started flow runs that find it only through MILEPOST_DB,
in folders that have no .milepost/ store of their own.

The test server trusts loopback connections, so the URL carries a password
the server ignores: that keeps it out of the deployment (milepost never
writes a password there), and the worker must name the store itself."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import CLI, Postgres, wait_until
from tests.flows.conftest import api_get, api_post, served

pytestmark = [pytest.mark.xdist_group("prefect"), pytest.mark.postgres]


def pg_url_with_password(postgres: Postgres, name: str) -> str:
    return postgres.create_db(name).replace(f"//{postgres.user}@", f"//{postgres.user}:not-written-anywhere@")


def planner(tmp_path: Path, url: str, marker: Path) -> CLI:
    """A folder where someone plans one item with one gated milestone on the shared store."""
    folder = tmp_path / "planner"
    folder.mkdir()
    cli = CLI(folder, {"MILEPOST_DB": url})
    cli("init", check=True)
    cli("item", "create", "shared work", check=True)
    cli("add", "work", "--gate", f"pwd > {marker}", check=True)
    return cli


def test_a_prefect_worker_with_milepost_db_runs_ticks_against_that_store(
    prefect_api: str, postgres: Postgres, tmp_path: Path
) -> None:
    url = pg_url_with_password(postgres, "mp_worker")
    marker = tmp_path / "worked"
    plan = planner(tmp_path, url, marker)
    elsewhere = tmp_path / "worker-machine"
    elsewhere.mkdir()
    dep = plan.json("deploy", "--pool", "milepost-pg-pool", "--working-dir", str(elsewhere))
    assert dep["db_in_deployment"] is False  # the password stays out of Prefect
    run = api_post(prefect_api, f"/deployments/{dep['deployment_id']}/create_flow_run", {})
    env = {k: v for k, v in os.environ.items() if not k.startswith("MILEPOST_")}
    p = subprocess.run(
        [str(Path(sys.executable).with_name("prefect")), "worker", "start", "--pool", "milepost-pg-pool", "--run-once"],
        cwd=elsewhere,
        env={**env, "MILEPOST_DB": url},
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert marker.exists(), p.stdout[-3000:] + p.stderr[-3000:]
    assert Path(marker.read_text().strip()) == elsewhere  # the gate ran where the worker runs ticks
    assert plan.json("list")["milestones"][0]["status"] == "done"
    assert api_get(prefect_api, f"/flow_runs/{run['id']}")["state_type"] == "COMPLETED"
    assert not (elsewhere / ".milepost" / "milepost.db").exists()  # no local store was made
    # Its log stayed on the machine that ran it, under the shared store's identity.
    run0 = plan.json("runs", "work")["runs"][0]
    assert run0["log_path"].startswith(str(plan.cwd))  # resolved from the reader's workspace...
    stored = Path(run0["log_path"]).relative_to(plan.cwd)
    assert (elsewhere / stored).is_file()  # ...and found where it was written


def test_serve_with_a_postgresql_url_drives_that_store(prefect_api: str, postgres: Postgres, tmp_path: Path) -> None:
    url = pg_url_with_password(postgres, "mp_serve")
    marker = tmp_path / "served"
    plan = planner(tmp_path, url, marker)
    server_dir = tmp_path / "server-machine"
    server_dir.mkdir()
    serving = CLI(server_dir)  # no MILEPOST_DB in its environment: only --db names the store
    with served(serving, "--db", url, "serve", "--interval", "2", log=tmp_path / "serve.log") as alive:
        done = lambda: plan.json("list")["milestones"][0]["status"] == "done"  # noqa: E731
        wait_until(done, 180, "a served tick to drive the item", output=alive)
    assert Path(marker.read_text().strip()) == server_dir
    assert not (server_dir / ".milepost" / "milepost.db").exists()

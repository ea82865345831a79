"""Which commands start a Prefect server when none is up: a drive with
something to run and `serve` start the workspace's in the background; a
drive with nothing to run answers from the store and starts none; deploy,
whose workers need a server that stays up, starts none and says what to run."""

from __future__ import annotations

import signal
import time
from pathlib import Path

import pytest

from tests.flows.test_server_kinds import Bare, clean_env

pytestmark = pytest.mark.xdist_group("prefect")


def test_deploy_with_no_server_says_what_to_run(workspace: Path) -> None:
    cli = Bare(workspace, env=clean_env(MILEPOST_SERVER="background"))
    cli("init", check=True)
    r = cli("deploy", "--pool", "p")
    assert r.code == 3, (r.out, r.err)
    assert r.err.strip() == (
        "milepost: error: deploy needs a Prefect server and none is up: run `milepost server start` (it runs until"
        " `milepost server stop`) or set PREFECT_API_URL"
    ), r.err
    assert cli("server", "status").code == 1  # nothing was started


def test_serve_with_no_server_starts_the_background_one(workspace: Path) -> None:
    cli = Bare(workspace, env=clean_env(MILEPOST_SERVER="background", MILEPOST_SERVER_IDLE="60"))
    cli("init", check=True)
    p = cli.popen("serve", "--interval", "3600")
    try:
        said = ""
        deadline = time.monotonic() + 300
        while "serving milepost-tick" not in said:
            assert time.monotonic() < deadline and p.poll() is None, said + (p.stderr.read() if p.stderr else "")
            assert p.stderr is not None
            said += p.stderr.readline()
        assert "Prefect server up in the background: UI http://127.0.0.1:" in said, said
        status = cli.json("server", "status")
        assert status["running"] and status["healthy"] and status["idle"] == 60, status
        assert f"against {status['api_url']}" in said, said
        assert status["users"] >= 1, status  # serve holds it in use
        assert status["started_by"] == "serve", status
        assert "started by `milepost serve`" in cli("server", "status").out
    finally:
        p.send_signal(signal.SIGINT)
        p.communicate(timeout=60)
        cli("server", "stop")
    assert p.returncode == 130  # interrupted, as every command (docs/cli.md); it exited 0


def test_a_drive_with_nothing_to_run_starts_no_server(workspace: Path) -> None:
    cli = Bare(workspace, env=clean_env(MILEPOST_SERVER="background"))
    cli("init", check=True)
    cli("item", "create", "done already", check=True)
    cli("add", "a", "--gate", "true", check=True)
    cli("start", "a", check=True)
    cli("done", "a", check=True)
    r = cli("drive")
    assert r.code == 0 and "ok: the milestone is done" in r.out, (r.out, r.err)
    assert "Prefect server" not in r.err, r.err
    events = cli("--json", "drive").out.splitlines()
    assert len(events) == 1 and '"event": "drive_finished"' in events[0], events
    assert cli("server", "status").code == 1  # none was started
    assert not (workspace / ".milepost" / "prefect" / "server.json").exists()

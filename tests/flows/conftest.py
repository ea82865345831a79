"""One real Prefect server for every drive test (``prefect server start`` on
loopback, started through milepost's own server management), and helpers."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from milepost.flows.server import server_start, server_stop
from tests.conftest import CLI

# All Prefect tests share one server: keep them on one xdist worker.
pytestmark = pytest.mark.xdist_group("prefect")


def pytest_configure(config: pytest.Config) -> None:
    """Prefect reads its settings when it is imported, and the test modules
    import it at collection: so the server's address is chosen (and put in
    the environment, which the CLI subprocesses inherit too) before that."""
    home = Path(tempfile.mkdtemp(prefix="milepost-prefect-test-")) / ".milepost"
    (home / "prefect").mkdir(parents=True)
    os.environ["MILEPOST_TEST_PREFECT_HOME"] = str(home)
    port = _free_port()
    os.environ["PREFECT_API_URL"] = f"http://127.0.0.1:{port}/api"
    os.environ["PREFECT_UI_URL"] = f"http://127.0.0.1:{port}"
    os.environ["PREFECT_HOME"] = str(home / "prefect")
    os.environ["DO_NOT_TRACK"] = "1"
    os.environ["PREFECT_SERVER_ANALYTICS_ENABLED"] = "false"
    os.environ["PREFECT_LOGGING_HANDLERS_CONSOLE_LEVEL"] = "CRITICAL"
    os.environ["MILEPOST_TEST_PREFECT_PORT"] = str(port)
    # `milepost serve` tests: let the server schedule and the runner poll quickly.
    os.environ["PREFECT_SERVER_SERVICES_SCHEDULER_LOOP_SECONDS"] = "2"
    os.environ["PREFECT_RUNNER_POLL_FREQUENCY"] = "1"


@pytest.fixture(scope="session")
def prefect_api() -> Iterator[str]:
    home = Path(os.environ["MILEPOST_TEST_PREFECT_HOME"])
    # idle: a suite killed before this fixture's teardown leaves no server running for more than an hour.
    info = server_start(home, port=int(os.environ["MILEPOST_TEST_PREFECT_PORT"]), timeout=240, idle=3600)
    assert info.api_url == os.environ["PREFECT_API_URL"] and info.healthy
    try:
        yield info.api_url
        # Send what Prefect's background workers still hold while the server is up.
        from prefect._internal.concurrency.services import QueueService

        QueueService.drain_all(timeout=10, at_exit=False)
    finally:
        server_stop(home)
        shutil.rmtree(home.parent, ignore_errors=True)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _call(req: urllib.request.Request | str) -> Any:
    """One call of the Prefect API, retried as Prefect's own client retries
    it: a 503 (the server's database busy under a loaded suite) is answered
    by waiting and asking again, a few times."""
    for attempt in range(6):
        try:
            with urllib.request.urlopen(req, timeout=30) as r:
                return json.loads(r.read())
        except urllib.error.HTTPError as e:
            if e.code != 503 or attempt == 5:
                raise
            time.sleep(0.5 * (attempt + 1))
    raise AssertionError("unreachable")


def api_get(api: str, path: str) -> Any:
    return _call(f"{api}{path}")


def api_post(api: str, path: str, body: dict[str, Any]) -> Any:
    req = urllib.request.Request(
        f"{api}{path}", data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}, method="POST"
    )
    return _call(req)


def flow_run_edges(api: str, flow_run_id: str) -> tuple[set[str], set[tuple[str, str]]]:
    """Task-run labels and the (parent, child) edges the UI draws, de-duplicated
    (graph-v2 repeats parents on SQLite)."""
    graph = api_get(api, f"/flow_runs/{flow_run_id}/graph-v2")
    labels = {nid: node["label"] for nid, node in graph["nodes"]}
    edges = set()
    for nid, node in graph["nodes"]:
        for parent in node["parents"]:
            edges.add((labels[parent["id"]], labels[nid]))
    return set(labels.values()), edges


def write_plan(ws: Path, text: str) -> Path:
    p = ws / "plan.yaml"
    p.write_text(text)
    return p


def run_script(cli: CLI, cwd: Path, script: str, *args: str, timeout: float = 180) -> Any:
    """Run ``script`` with Python in a process of its own, in ``cwd`` with the
    CLI's environment; it must exit 0: the JSON of its last line of output."""
    p = subprocess.run(
        [sys.executable, "-c", script, *args], cwd=cwd, env=cli.env, capture_output=True, text=True, timeout=timeout
    )
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout.strip().splitlines()[-1])


# Drives run Prefect: here every CLI call is the real entry point in its own
# process (as users and CI run it), not the in-process runner of the other tests.
@pytest.fixture
def cli(real_cli: CLI) -> CLI:
    return real_cli


@pytest.fixture
def bare_cli(real_bare_cli: CLI) -> CLI:
    return real_bare_cli


@contextlib.contextmanager
def served(cli: CLI, *args: str, log: Path) -> Iterator[Callable[[], str]]:
    """``milepost ARGS serve ...`` running in the background (stopped with
    SIGINT at the end), its output in ``log`` (a pipe nobody reads would fill
    up and stop it); yields a check that it still runs, which returns the
    output's tail for a failure message (``wait_until(..., output=alive)``)."""
    with log.open("w") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "milepost", *args], cwd=cli.cwd, env=cli.env, stdout=out, stderr=subprocess.STDOUT
        )

    def alive() -> str:
        tail = log.read_text(errors="replace")[-4000:]
        assert proc.poll() is None, f"it exited with {proc.returncode}:\n{tail}"
        return tail

    try:
        yield alive
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()

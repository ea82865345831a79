"""The fault test's parts: the plan whose gates keep a ledger, the module's
own Prefect server that a test may kill, a real ``milepost drive`` process,
the figures, and the check that every gate passed exactly once."""

from __future__ import annotations

import json
import os
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from milepost.flows.server import server_start, server_status, server_stop
from tests.conftest import CLI
from tests.flows.conftest import _free_port
from tests.ledger import Ledger, gate_command, write_gate

FIGURES: dict[str, float] = {}

NAMES = ["a1", "a2", "b1", "b2", "c"]
PLAN = """objective: faults
milestones:
  - {{name: a1, gate: "{gate}"}}
  - {{name: a2, gate: "{gate}"}}
  - {{name: b1, deps: [a1], gate: "{gate}"}}
  - {{name: b2, deps: [a2], gate: "{gate}"}}
  - {{name: c, deps: [b1, b2], gate: "{gate}"}}
"""


def figure(name: str, value: float) -> None:
    FIGURES[name] = round(value, 1)
    print(f"fault test: {name}: {value:.1f}")
    out = os.environ.get("MILEPOST_FAULT_REPORT")
    if out:
        path = Path(out)
        data: dict[str, Any] = json.loads(path.read_text()) if path.exists() else {}
        data[name] = round(value, 1)
        path.write_text(json.dumps(data, indent=2, sort_keys=True))


class Server:
    """This module's own ``prefect server``, which a test may kill."""

    def __init__(self) -> None:
        self.home = Path(tempfile.mkdtemp(prefix="milepost-fault-prefect-")) / ".milepost"
        (self.home / "prefect").mkdir(parents=True)
        self.port = _free_port()
        self.api_url = f"http://127.0.0.1:{self.port}/api"

    def up(self) -> None:
        if not server_status(self.home).healthy:
            server_start(self.home, port=self.port, timeout=240)

    def kill(self) -> None:
        info = server_status(self.home)
        assert info.pid is not None
        os.killpg(info.pid, signal.SIGKILL)

    def remove(self) -> None:
        server_stop(self.home)
        shutil.rmtree(self.home.parent, ignore_errors=True)


def plan(cli: CLI, seconds: float, text: str = PLAN) -> tuple[str, Ledger]:
    """Apply a plan whose gates keep a ledger and take ``seconds``; (item id, ledger)."""
    ws = cli.cwd
    write_gate(ws)
    ledger = Ledger(ws / "ledger")
    gate, quick = (gate_command(ws / "gate.sh", ledger.path, t) for t in (seconds, 0.5))
    (ws / "plan.yaml").write_text(text.format(gate=gate, quick=quick))
    return str(cli.json("plan", "apply", "plan.yaml")["id"]), ledger


class Driver:
    """A real ``milepost drive`` process, its output in a file beside the workspace."""

    def __init__(self, cli: CLI, item: str, *args: str, preexec: Callable[[], None] | None = None, **env: str) -> None:
        self.log = cli.cwd.parent / f"drive-{time.monotonic_ns()}.out"
        self.started = time.monotonic()
        with open(self.log, "w") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "milepost", "drive", item, *args],
                cwd=cli.cwd,
                env={**cli.env, **env},
                stdout=out,
                stderr=subprocess.STDOUT,
                text=True,
                preexec_fn=preexec,
            )
        self.rusage: resource.struct_rusage | None = None

    def finish(self, timeout: float) -> tuple[int, str]:
        """Wait for the driver (at most ``timeout`` s): (exit code, its output)."""
        deadline = time.monotonic() + timeout
        while True:
            pid, status, usage = os.wait4(self.proc.pid, os.WNOHANG)
            if pid:
                self.rusage = usage
                self.proc.returncode = os.waitstatus_to_exitcode(status)
                break
            if time.monotonic() > deadline:
                self.proc.kill()
                self.proc.wait()
                raise AssertionError(f"the drive did not end within {timeout:g} s: {self.log.read_text()[-3000:]}")
            time.sleep(0.05)
        return self.proc.returncode, self.log.read_text()

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGCONT)
            self.proc.kill()
            self.proc.wait()


def errors(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith("milepost: error:")]


def passed_runs(cli: CLI, item: str, name: str) -> list[int]:
    runs = cli.json("runs", name, "--item", item)["runs"]
    return [r["attempt"] for r in runs if r["outcome"] == "passed"]


def check_exactly_once(cli: CLI, item: str, ledger: Ledger, names: list[str]) -> None:
    """Every milestone done, its gate passed exactly once (the ledger and the
    store agree on the attempt), no two executions overlapped, and every
    execution is an attempt in the store."""
    listed = cli.json("list", "--item", item)["milestones"]
    assert {m["name"]: m["status"] for m in listed} == dict.fromkeys(names, "done"), listed
    assert ledger.overlaps() == [], ledger.lines()
    ends = ledger.count("end")
    for name in names:
        runs = cli.json("runs", name, "--item", item)["runs"]
        passed = [r["attempt"] for r in runs if r["outcome"] == "passed"]
        ended = [a for kind, m, a in ledger.lines() if kind == "end" and m == name]
        assert ends[name] == 1 and ended == passed, (name, ledger.lines(), runs)
        recorded = {r["attempt"] for r in runs}
        assert all(a in recorded for m, a in ledger.executions() if m == name), (name, ledger.lines(), runs)

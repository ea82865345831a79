"""Ctrl-C in a real terminal (a pseudo-terminal: the drive is its session's
foreground group, the interrupt character makes the line discipline send
SIGINT to that whole group, as a terminal does) on both server kinds, and
the background server's life: started by the first drive, reused by the
next, stopped by itself once unused, shown by `server status`."""

from __future__ import annotations

import os
import pty
import select
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import CLI, wait_until

pytestmark = pytest.mark.xdist_group("prefect")


def clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PREFECT_", "MILEPOST_"))}
    return {**env, **extra}


class Bare(CLI):
    """The real entry point with no Prefect settings at all (not the shared test server's)."""

    @property
    def env(self) -> dict[str, str]:
        return dict(self.extra)


def drive_in_a_terminal(ws: Path, env: dict[str, str], marker: Path, timeout: float = 240) -> tuple[int, float, str]:
    """`milepost drive` in a pty; Ctrl-C once its gate runs: (exit code, seconds from Ctrl-C to exit, output)."""
    pid, fd = pty.fork()
    if pid == 0:  # the child: a session leader with the pty as its terminal
        os.chdir(ws)
        os.execve(sys.executable, [sys.executable, "-m", "milepost", "drive"], env)
    out = bytearray()
    sent: float | None = None
    deadline = time.monotonic() + timeout
    while True:
        r, _, _ = select.select([fd], [], [], 0.1)
        if r:
            try:
                chunk = os.read(fd, 65536)
            except OSError:
                chunk = b""
            if not chunk:
                break
            out += chunk
        if sent is None and marker.exists() and b"running: slow" in out:  # the gate runs, the table shows it
            os.write(fd, b"\x03")  # Ctrl-C: SIGINT to the terminal's foreground process group
            sent = time.monotonic()
        assert time.monotonic() < deadline, out.decode(errors="replace")
    _, status = os.waitpid(pid, 0)
    os.close(fd)
    assert sent is not None, out.decode(errors="replace")
    return os.waitstatus_to_exitcode(status), time.monotonic() - sent, out.decode(errors="replace")


def keepers_of(owner: int) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                cmd = Path(f"/proc/{entry}/cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if b"milepost.flows.server_keeper" in cmd and str(owner).encode() in cmd:
                found.append(int(entry))
    return found


def interrupted_plan(cli: CLI, ws: Path) -> Path:
    marker = ws / "started"
    (ws / "plan.yaml").write_text(
        f"objective: ctrl-c\nmilestones:\n  - {{name: slow, gate: 'touch {marker}; sleep 60'}}\n"
    )
    cli("plan", "apply", "plan.yaml", check=True)
    return marker


def assert_ready_again(cli: CLI) -> None:
    [m] = cli.json("list")["milestones"]
    assert m["status"] == "pending" and m["view"] == "ready" and m["attempts"] == 0, m


@pytest.mark.parametrize("kind", ["temporary", "background"])
def test_ctrl_c_in_a_terminal_exits_130_at_once(workspace: Path, kind: str) -> None:
    env = clean_env(MILEPOST_SERVER=kind, MILEPOST_SERVER_IDLE="60")
    cli = Bare(workspace, env=env)
    cli("init", check=True)
    try:
        if kind == "background":  # a server that runs: started by a first drive
            (workspace / "warm.yaml").write_text("objective: warm\nmilestones:\n  - {name: w, gate: 'true'}\n")
            cli("plan", "apply", "warm.yaml", check=True)
            assert cli("drive", timeout=300).code == 0
            before = cli.json("server", "status")
        marker = interrupted_plan(cli, workspace)
        code, took, out = drive_in_a_terminal(workspace, {**cli.env}, marker)
        assert code == 130, out
        assert took < 3.0, (took, out)
        assert "Prefect API" not in out and "warning" not in out, out
        assert_ready_again(cli)
        if kind == "background":  # the server lived through the Ctrl-C
            after = cli.json("server", "status")
            assert after["pid"] == before["pid"] and after["healthy"]
    finally:
        cli("server", "stop")


def test_the_temporary_server_ends_with_its_drive(workspace: Path) -> None:
    env = clean_env(MILEPOST_SERVER="temporary")
    cli = Bare(workspace, env=env)
    cli("init", check=True)
    marker = interrupted_plan(cli, workspace)
    proc = cli.popen("drive")
    wait_until(marker.exists, 240, "the gate to start", step=0.1)
    assert len(keepers_of(proc.pid)) == 1  # its own server, in its own session
    [keeper] = keepers_of(proc.pid)
    assert os.getpgid(keeper) == keeper and os.getsid(keeper) == keeper
    proc.kill()  # even a driver killed outright leaves no server behind
    proc.communicate()
    wait_until(lambda: not keepers_of(proc.pid), 20, "the temporary server to stop")
    assert cli("server", "status").code == 1  # never the workspace's server


def test_the_background_server_is_reused_and_stops_when_unused(workspace: Path) -> None:
    # (Long enough for the steps between the drives on a loaded 2-core machine: several seconds each.)
    env = clean_env(MILEPOST_SERVER="background", MILEPOST_SERVER_IDLE="20")
    cli = Bare(workspace, env=env)
    cli("init", check=True)
    # The gate passes only while a drive is marked as the server's user (its keeper reads the marks): the
    # drive that starts it, and the one that finds it running (marked through PREFECT_API_URL, not at all).
    gate = 'test -n "$(ls .milepost/prefect/server.users)"'
    (workspace / "plan.yaml").write_text(f"objective: twice\nmilestones:\n  - {{name: a, gate: '{gate}'}}\n")
    cli("plan", "apply", "plan.yaml", check=True)
    try:
        first = cli("drive", "--no-cache", timeout=300)
        assert first.code == 0, first.err
        assert "Prefect server up in the background: UI http://127.0.0.1:" in first.err
        assert "stops itself after 20 s unused" in first.err
        status = cli.json("server", "status")
        assert status["started_by"] == "drive" and status["idle"] == 20 and status["healthy"]
        text = cli("server", "status").out
        assert "started by `milepost drive`" in text and "stops itself after 20 s unused" in text
        cli("needs-fix", "a", "--reason", "again", check=True)
        second = cli("drive", "--no-cache", timeout=120)
        assert second.code == 0, second.err
        assert "background" not in second.err  # nothing started: the same server
        assert cli.json("server", "status")["pid"] == status["pid"]
        # Unused (no drive, no connection) for 20 s: it stops itself, session and all.
        wait_until(lambda: cli("server", "status").code == 1, 90, "the server to stop itself")
        wait_until(lambda: not Path(f"/proc/{status['pid']}").exists(), 20, "its keeper to end")
        # `server start` runs until `server stop`.
        started = cli.json("server", "start", timeout=300)
        assert started["idle"] is None and started["started_by"] == "server start"
        assert "runs until `milepost server stop`" in cli("server", "status").out
        assert cli.json("server", "stop")["stopped"] is True
        assert cli("server", "status").code == 1
    finally:
        cli("server", "stop")

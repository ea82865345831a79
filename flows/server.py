"""Where Prefect talks to: the workspace's own ``prefect server`` when it is
up, else Prefect's temporary server, both with a Prefect home inside
``.milepost/`` so runs stay with the project.

Nothing here imports Prefect: ``configure_prefect`` must run before Prefect
is imported (it reads its settings from the environment), and ``milepost
server status`` should answer without paying for the import.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from milepost.errors import EnvironmentProblem

__all__ = ["ServerInfo", "configure_prefect", "prefect_home", "server_start", "server_status", "server_stop"]

# A fresh Prefect home takes ~20 s to set up its database on a 2-core machine;
# Prefect's default of 20 s is too tight.
STARTUP_TIMEOUT = "180"


def prefect_home(home: Path) -> Path:
    return home / "prefect"


def _state_file(home: Path) -> Path:
    return prefect_home(home) / "server.json"


@dataclass(frozen=True)
class ServerInfo:
    running: bool
    healthy: bool
    pid: int | None = None
    port: int | None = None
    api_url: str | None = None
    ui_url: str | None = None
    log: str | None = None


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _healthy(api_url: str, timeout: float = 2.0) -> bool:
    try:
        with urllib.request.urlopen(f"{api_url}/health", timeout=timeout) as r:
            return bool(r.status == 200)
    except OSError:
        return False


def server_status(home: Path) -> ServerInfo:
    path = _state_file(home)
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return ServerInfo(running=False, healthy=False)
    pid = int(data["pid"])
    if not _pid_alive(pid):
        return ServerInfo(running=False, healthy=False, log=data.get("log"))
    return ServerInfo(
        running=True,
        healthy=_healthy(data["api_url"]),
        pid=pid,
        port=int(data["port"]),
        api_url=data["api_url"],
        ui_url=data["ui_url"],
        log=data.get("log"),
    )


def configure_prefect(home: Path, *, quiet_console: bool = True) -> str | None:
    """Set Prefect's environment for this workspace (before importing Prefect).
    Returns the API URL of the workspace's server when one is up, else None
    (Prefect then starts its temporary server). Explicit settings win."""
    phome = prefect_home(home)
    phome.mkdir(parents=True, exist_ok=True)
    env = os.environ
    env.setdefault("PREFECT_HOME", str(phome))
    env.setdefault("DO_NOT_TRACK", "1")
    env.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    env.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", STARTUP_TIMEOUT)
    # Every API call bounded (MILEPOST_PREFECT_TIMEOUT, _RETRIES): see prefect_guard.
    from milepost.flows.prefect_guard import client_settings
    from milepost.settings import load_settings

    for name, value in client_settings(load_settings()).items():
        env.setdefault(name, value)
    if quiet_console:
        # milepost shows its own progress; task-run logs still reach the API and the UI.
        env.setdefault("PREFECT_LOGGING_HANDLERS_CONSOLE_LEVEL", "CRITICAL")
    if env.get("PREFECT_API_URL"):
        return env["PREFECT_API_URL"]
    info = server_status(home)
    if info.running and info.healthy and info.api_url:
        env["PREFECT_API_URL"] = info.api_url
        if info.ui_url:
            env.setdefault("PREFECT_UI_URL", info.ui_url)
        return info.api_url
    return None


# Servers started by this process: kept so they are reaped on stop (and
# Python does not warn about a child it thinks was forgotten).
_CHILDREN: dict[int, subprocess.Popen[bytes]] = {}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _prefect_cli() -> list[str]:
    script = Path(sys.executable).with_name("prefect")
    return [str(script)] if script.exists() else [sys.executable, "-m", "prefect"]


def server_start(home: Path, port: int | None = None, timeout: float = 180.0) -> ServerInfo:
    """Start ``prefect server start`` on loopback for this workspace, detached,
    and wait until it answers. Idempotent: a healthy server is reused."""
    info = server_status(home)
    if info.running and info.healthy:
        return info
    if info.running and info.pid:
        server_stop(home)
    port = port or _free_port()
    phome = prefect_home(home)
    phome.mkdir(parents=True, exist_ok=True)
    api_url = f"http://127.0.0.1:{port}/api"
    ui_url = f"http://127.0.0.1:{port}"
    log = phome / "server.log"
    env = {
        **os.environ,
        "PREFECT_HOME": str(phome),
        "DO_NOT_TRACK": "1",
        "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
        # Without this the UI calls port 4200 whatever --port says.
        "PREFECT_SERVER_API_PORT": str(port),
        "PREFECT_SERVER_API_HOST": "127.0.0.1",
        "PREFECT_UI_API_URL": api_url,
        "PREFECT_API_URL": api_url,
    }
    with open(log, "ab") as out:
        proc = subprocess.Popen(
            [*_prefect_cli(), "server", "start", "--host", "127.0.0.1", "--port", str(port)],
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
        )
    _CHILDREN[proc.pid] = proc
    _state_file(home).write_text(
        json.dumps({"pid": proc.pid, "port": port, "api_url": api_url, "ui_url": ui_url, "log": str(log)})
    )
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise EnvironmentProblem(f"prefect server exited with {proc.returncode} while starting; see {log}")
        if _healthy(api_url):
            return server_status(home)
        time.sleep(0.5)
    server_stop(home)
    raise EnvironmentProblem(f"prefect server did not answer on {api_url} within {timeout:g} s; see {log}")


def server_stop(home: Path, timeout: float = 20.0) -> bool:
    """Stop the workspace's server (its whole process group). True if one ran."""
    info = server_status(home)
    path = _state_file(home)
    if not info.running or info.pid is None:
        path.unlink(missing_ok=True)
        return False
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(info.pid, sig)
        except ProcessLookupError:
            break
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and _pid_alive(info.pid):
            time.sleep(0.2)
            with contextlib.suppress(ChildProcessError):
                os.waitpid(info.pid, os.WNOHANG)  # reap it if it is our child
        if not _pid_alive(info.pid):
            break
    child = _CHILDREN.pop(info.pid, None)
    if child is not None:
        child.wait(timeout=timeout)
    path.unlink(missing_ok=True)
    return True

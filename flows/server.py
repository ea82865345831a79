"""Where Prefect talks to: the workspace's own ``prefect server`` when it is
up; else one that a drive starts, in the background for the next drives too
(``MILEPOST_SERVER=background``, stopped once unused for
``MILEPOST_SERVER_IDLE`` seconds) or a temporary one stopped with the drive
(``temporary``); all with a Prefect home inside ``.milepost/`` so runs stay
with the project. Every server milepost starts runs in a session of its own
under a keeper (:mod:`milepost.flows.server_keeper`): a terminal's Ctrl-C
reaches the drive, never the server it talks to.

Nothing here imports Prefect: ``configure_prefect`` must run before Prefect
is imported (it reads its settings from the environment), and ``milepost
server status`` should answer without paying for the import.
"""

from __future__ import annotations

import atexit
import contextlib
import importlib.util
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from milepost.errors import EnvironmentProblem

__all__ = [
    "ServerInfo",
    "configure_prefect",
    "ensure_server",
    "healthy",
    "prefect_home",
    "register_use",
    "server_start",
    "server_status",
    "server_stop",
    "temporary_server",
]

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
    started_by: str | None = None  # the command that started it: "server start", "drive", "serve" or "tick"
    idle: float | None = None  # seconds unused before it stops itself; None: until stopped
    users: int = 0  # milepost commands using it now
    last_use: float | None = None  # when it was last in use (epoch seconds), kept by its keeper


def _pid_alive(pid: int) -> bool:
    from milepost.flows.server_keeper import alive

    return alive(pid)  # (not a zombie: a keeper that ended, not reaped yet)


def healthy(api_url: str, timeout: float = 2.0) -> bool:
    """Whether the Prefect API at ``api_url`` answers its health check (no Prefect import)."""
    try:
        with urllib.request.urlopen(f"{api_url.rstrip('/')}/health", timeout=timeout) as r:
            return bool(r.status == 200)
    except (OSError, ValueError):  # (ValueError: not a URL urllib can open)
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
    from milepost.flows.server_keeper import live_users

    last_use: float | None = None
    with contextlib.suppress(OSError, ValueError):
        last_use = float((prefect_home(home) / "server.last-use").read_text())
    return ServerInfo(
        running=True,
        healthy=healthy(data["api_url"]),
        pid=pid,
        port=int(data["port"]),
        api_url=data["api_url"],
        ui_url=data["ui_url"],
        log=data.get("log"),
        started_by=data.get("started_by"),
        idle=data.get("idle"),
        users=live_users(_users(home)),
        last_use=last_use,
    )


def _users(home: Path) -> Path:
    return prefect_home(home) / "server.users"


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


def _server_env(phome: Path, port: int) -> dict[str, str]:
    api_url = f"http://127.0.0.1:{port}/api"
    return {
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


def _spawn(
    home: Path, port: int, command: list[str], env: dict[str, str], log: Path, keeper: list[str]
) -> subprocess.Popen[bytes]:
    """``command`` under a keeper, in a new session (see the module)."""
    with open(log, "ab") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "milepost.flows.server_keeper", "--port", str(port), *keeper, "--", *command],
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
        )
    _CHILDREN[proc.pid] = proc
    return proc


def _wait_healthy(proc: subprocess.Popen[bytes], api_url: str, log: Path, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise EnvironmentProblem(f"prefect server exited with {proc.returncode} while starting; see {log}")
        if healthy(api_url):
            return
        time.sleep(0.2)
    _kill_group(proc.pid, 5.0)
    raise EnvironmentProblem(f"prefect server did not answer on {api_url} within {timeout:g} s; see {log}")


def server_start(
    home: Path,
    port: int | None = None,
    timeout: float = 180.0,
    *,
    idle: float | None = None,
    started_by: str = "server start",
) -> ServerInfo:
    """Start ``prefect server start`` on loopback for this workspace, in its
    own session, and wait until it answers; with ``idle`` it stops itself
    once unused for that many seconds. Idempotent: a healthy server is reused."""
    info = server_status(home)
    if info.running and info.healthy:
        return info
    if info.running and info.pid:
        server_stop(home)
    port = port or _free_port()
    phome = prefect_home(home)
    phome.mkdir(parents=True, exist_ok=True)
    _users(home).mkdir(exist_ok=True)
    api_url = f"http://127.0.0.1:{port}/api"
    ui_url = f"http://127.0.0.1:{port}"
    log = phome / "server.log"
    state = _state_file(home)
    keeper = ["--state", str(state), "--users", str(_users(home)), "--last-use", str(phome / "server.last-use")]
    if idle is not None:
        keeper += ["--idle", f"{idle:g}"]
    command = [*_prefect_cli(), "server", "start", "--host", "127.0.0.1", "--port", str(port)]
    proc = _spawn(home, port, command, _server_env(phome, port), log, keeper)
    state.write_text(
        json.dumps(
            {
                "pid": proc.pid,
                "port": port,
                "api_url": api_url,
                "ui_url": ui_url,
                "log": str(log),
                "started_by": started_by,
                "idle": idle,
            }
        )
    )
    (phome / "server.last-use").write_text(f"{time.time():.3f}\n")
    try:
        _wait_healthy(proc, api_url, log, timeout)
    except EnvironmentProblem:
        state.unlink(missing_ok=True)
        raise
    return server_status(home)


def temporary_server(home: Path, timeout: float = float(STARTUP_TIMEOUT)) -> str:
    """A Prefect server for this process only, as Prefect's own temporary
    server is (no UI), but in a session of its own: it stops when this
    process exits, or is killed. Returns its API URL."""
    port = _free_port()
    phome = prefect_home(home)
    phome.mkdir(parents=True, exist_ok=True)
    api_url = f"http://127.0.0.1:{port}/api"
    spec = importlib.util.find_spec("prefect")  # (not imported: its settings are read from the environment)
    app_dir = str(Path(spec.origin).parent.parent) if spec and spec.origin else "."
    # The command and settings Prefect's SubprocessASGIServer uses for its temporary server.
    command = [
        sys.executable,
        "-m",
        "uvicorn",
        "--app-dir",
        app_dir,
        "--factory",
        "prefect.server.api.server:create_app",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--log-level",
        "error",
        "--lifespan",
        "on",
    ]
    env = {
        **_server_env(phome, port),
        "PREFECT_UI_ENABLED": "0",
        "PREFECT__SERVER_EPHEMERAL": "1",
        "PREFECT__SERVER_FINAL": "1",
    }
    log = phome / "temporary-server.log"
    proc = _spawn(home, port, command, env, log, ["--owner", str(os.getpid())])
    atexit.register(_kill_group, proc.pid, 0.0)
    _wait_healthy(proc, api_url, log, timeout)
    return api_url


def register_use(home: Path) -> None:
    """Mark the workspace's server in use by this process until it exits
    (its keeper reads the mark; a dead process's mark does not count)."""
    from milepost.gates.liveness import process_start

    users = _users(home)
    users.mkdir(parents=True, exist_ok=True)
    mark = users / str(os.getpid())
    mark.write_text(f"{process_start(os.getpid()) or ''}\n")
    atexit.register(mark.unlink, missing_ok=True)


def ensure_server(
    home: Path,
    mode: str,
    idle: float,
    say: Callable[[str], None],
    *,
    timeout: float = float(STARTUP_TIMEOUT),
    by: str = "drive",
    explicit: bool | None = None,
) -> tuple[str, str]:
    """Point Prefect at a server for this command (before Prefect is
    imported): (API URL, how) with how ``env`` (PREFECT_API_URL names one),
    ``running`` (the workspace's), ``started`` (this command started the
    workspace's in the background: ``by`` names the command in its status)
    or ``temporary`` (``mode`` temporary). ``explicit``: whether PREFECT_API_URL
    is the user's (default: whether it is set), not the workspace server's."""
    if explicit if explicit is not None else bool(os.environ.get("PREFECT_API_URL")):
        return configure_prefect(home) or os.environ["PREFECT_API_URL"], "env"
    # In use before it is looked at: its keeper, about to stop it as unused, sees this command first
    # (marked after the look, a drive found it healthy, then lost it to its idle stop).
    register_use(home)
    api = configure_prefect(home)
    if api is not None:
        return api, "running"
    if mode == "temporary":
        api = temporary_server(home, timeout)
        os.environ["PREFECT_API_URL"] = api
        return api, "temporary"
    import fcntl

    with open(prefect_home(home) / "server.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one start for drives that begin together
        how = "running"  # (marked in use above: a server starting longer than its idle time is in use)
        info = server_status(home)
        if not (info.running and info.healthy):
            say("starting the workspace's Prefect server in the background (kept for the next drives) ...")
            info = server_start(home, timeout=timeout, idle=idle, started_by=by)
            how = "started"
    assert info.api_url is not None
    configure_prefect(home)
    return info.api_url, how


def _kill_group(pgid: int, timeout: float) -> bool:
    """SIGTERM to a server's session, SIGKILL after ``timeout`` (no wait at 0). True if it ran."""
    from milepost.flows.server_keeper import alive
    from milepost.gates.liveness import group_alive

    try:
        os.killpg(pgid, signal.SIGTERM)
    except ProcessLookupError:
        return False
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and group_alive(pgid):
        time.sleep(0.1)
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pgid, os.WNOHANG)  # reap the keeper if it is our child
    if timeout > 0 and group_alive(pgid):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pgid, signal.SIGKILL)
    child = _CHILDREN.pop(pgid, None)
    if child is not None and (timeout > 0 or not alive(pgid)):
        with contextlib.suppress(subprocess.TimeoutExpired):
            child.wait(timeout=max(timeout, 0.01))
    return True


def server_stop(home: Path, timeout: float = 20.0) -> bool:
    """Stop the workspace's server (its whole session). True if one ran."""
    info = server_status(home)
    path = _state_file(home)
    if not info.running or info.pid is None:
        path.unlink(missing_ok=True)
        return False
    _kill_group(info.pid, timeout)
    path.unlink(missing_ok=True)
    return True

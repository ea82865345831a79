"""The keeper of a Prefect server milepost started: the leader of the
server's own session (so a terminal's Ctrl-C never reaches the server), it
runs ``prefect server start`` as its child and stops it when its use is over:

- ``--owner PID``: a drive's temporary server, stopped when that process is
  gone (also when it was killed and could not stop the server itself);
- ``--idle SECONDS``: the workspace's server a drive started in the
  background, stopped once unused for that long. In use means: a milepost
  command registered in ``--users`` (a file per process, named by its pid,
  holding its start time) still runs, or a connection to the server's port
  is open (a browser on the UI, a Prefect client). The time of its last use
  is kept in ``--last-use`` for ``milepost server status``.

Without either it runs until stopped (``milepost server stop`` signals the
whole session). It imports no Prefect and nothing heavy: it is started
with the server and lives as long.

    python -m milepost.flows.server_keeper --port P [--owner PID] [--idle S]
        [--users DIR] [--state FILE] [--last-use FILE] -- COMMAND...
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from milepost.gates.liveness import Life, life, process_start

POLL = 1.0
STOP_GRACE = 10.0


def alive(pid: int, start: int | None = None) -> bool:
    """Whether ``pid`` runs (and is the process that started at ``start``,
    when given); an entry in /proc that cannot be read does not count."""
    return life(pid, start) is Life.RUNS


def live_users(users: Path) -> int:
    """How many registered commands still run (the files of those gone are removed)."""
    count = 0
    with contextlib.suppress(OSError):
        for f in users.iterdir():
            try:
                pid, start = int(f.name), f.read_text().strip()
            except (OSError, ValueError):
                continue
            if alive(pid, int(start) if start.isdigit() else None):
                count += 1
            else:
                f.unlink(missing_ok=True)
    return count


def open_connections(port: int, own: set[int]) -> int:
    """Established TCP connections to ``port`` on this machine (Linux's
    /proc/net/tcp), not counting those the server's own processes (``own``) opened."""
    theirs: set[str] = set()  # socket inodes of the server's processes
    for pid in own:
        with contextlib.suppress(OSError):
            for fd in os.listdir(f"/proc/{pid}/fd"):
                with contextlib.suppress(OSError):
                    link = os.readlink(f"/proc/{pid}/fd/{fd}")
                    if link.startswith("socket:["):
                        theirs.add(link[8:-1])
    count = 0
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            f = line.split()
            # the client's end of a connection to the port: remote port == port, ESTABLISHED
            if len(f) > 9 and f[3] == "01" and int(f[2].rsplit(":", 1)[1], 16) == port and f[9] not in theirs:
                count += 1
    return count


def _children(pid: int) -> set[int]:
    """``pid`` and its descendants (Linux), for ``open_connections``."""
    found, todo = {pid}, [pid]
    while todo:
        p = todo.pop()
        with contextlib.suppress(OSError):
            for task in os.listdir(f"/proc/{p}/task"):
                for c in Path(f"/proc/{p}/task/{task}/children").read_text().split():
                    if int(c) not in found:
                        found.add(int(c))
                        todo.append(int(c))
    return found


def stop(child: subprocess.Popen[bytes], why: str, state: Path | None) -> None:
    print(f"milepost: {why}: stopping the Prefect server (pid {child.pid})", file=sys.stderr, flush=True)
    if state is not None:  # no longer offered to drives (unless it names another server by now)
        with contextlib.suppress(OSError, ValueError):
            if json.loads(state.read_text()).get("pid") == os.getpid():
                state.unlink()
    child.terminate()
    try:
        child.wait(STOP_GRACE)
    except subprocess.TimeoutExpired:
        os.killpg(os.getpgrp(), signal.SIGKILL)  # whatever is left of the session, this keeper too


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m milepost.flows.server_keeper")
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--owner", type=int, default=None)
    p.add_argument("--idle", type=float, default=None)
    p.add_argument("--users", type=Path, default=None)
    p.add_argument("--state", type=Path, default=None)
    p.add_argument("--last-use", type=Path, default=None)
    p.add_argument("command", nargs=argparse.REMAINDER)
    a = p.parse_args(argv)
    command = a.command[1:] if a.command[:1] == ["--"] else a.command
    owner_start = process_start(a.owner) if a.owner else None
    # SIGTERM (milepost server stop, to the whole session) or SIGHUP: the child has it too; end with it.
    signal.signal(signal.SIGTERM, lambda *_: None)
    child = subprocess.Popen(command, stdin=subprocess.DEVNULL)
    last_use = time.time()
    written = 0.0
    while True:
        try:
            code = child.wait(POLL)
        except subprocess.TimeoutExpired:
            pass
        else:
            return code
        now = time.time()
        if a.owner is not None and not alive(a.owner, owner_start):
            stop(child, f"its drive (pid {a.owner}) has ended", a.state)
            return 0
        if a.idle is None:
            continue
        used = bool(a.users is not None and live_users(a.users)) or open_connections(a.port, _children(child.pid)) > 0
        if used:
            last_use = now
        # (written every 5 s in use, and as its use ends: what `milepost server status` reads)
        if a.last_use is not None and (last_use - written >= 5 or (not used and written < last_use)):
            with contextlib.suppress(OSError):
                a.last_use.write_text(f"{last_use:.3f}\n")
            written = last_use
        if now - last_use >= a.idle:
            stop(child, f"unused for {a.idle:g} s", a.state)
            return 0


if __name__ == "__main__":
    raise SystemExit(main())

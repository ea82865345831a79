"""Is the process that took a lease provably gone?

A lease records where its holder runs (host, boot id, pid and the pid's start
time, see ``claims.take_lease``). On the same machine, in the same boot, a
holder whose pid is free, a zombie, or now another process (another start
time) is dead: its lease can be taken over at once instead of after it
expires. Anything else (another machine, another boot, a live or merely
stopped process, a lease without the facts) proves nothing: then only the
lease's expiry does.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from milepost.gates.supervisor import host_identity

__all__ = ["holder_gone"]


def _stat(pid: int) -> tuple[bytes, int | None] | None:
    """(state, start time) of a process from ``/proc`` (Linux), None when it does not exist."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
    except FileNotFoundError:
        return None
    except OSError:
        return b"?", None
    fields = data[data.rfind(b")") + 2 :].split()
    start = int(fields[19]) if len(fields) > 19 and fields[19].isdigit() else None
    return (fields[0] if fields else b"?"), start


def holder_gone(info: Mapping[str, Any] | None) -> bool:
    """Whether the lease holder ``info`` describes has died (see the module)."""
    if not info or not os.path.isdir("/proc/self"):
        return False
    me = host_identity()
    if not me["boot"] or info.get("boot") != me["boot"] or info.get("host") != me["host"]:
        return False
    pid = info.get("pid")
    if not isinstance(pid, int) or pid <= 0 or pid == os.getpid():
        return False
    found = _stat(pid)
    if found is None:
        return True
    state, start = found
    if state in (b"Z", b"X"):
        return True
    recorded = info.get("start")
    return isinstance(recorded, int) and start is not None and start != recorded

"""Is a process still there? The one place that reads ``/proc/<pid>/stat``.

A process id means something only on one machine, in one boot: a record of
a process (a lease's holder, a drive that submitted a gate task, a gate's
process group, the drive that owns a Prefect server) keeps the boot id and
the process's start time beside its pid, so that a pid the kernel has given
to another process since is not mistaken for it. The rules, in
:func:`life`:

- **gone**: ``/proc`` has no entry for the pid, or the process has ended and
  waits to be reaped (a zombie, state ``Z`` or ``X``), or the pid now belongs
  to a process that started at another time than the one recorded;
- **unknown**: its entry cannot be read, or this is not Linux and the start
  time cannot be checked (there, ``kill(pid, 0)`` tells only whether the pid
  is free: a free pid is gone);
- **runs** otherwise (a stopped process runs: it may be continued).

Standard library only, and nothing else of milepost: the gate supervisor
(``_supervisor_main.py``, run as ``python -I -S`` with no milepost on its
path) imports this file from the folder beside it, and the server keeper
lives as long as its server.
"""

from __future__ import annotations

import contextlib
import enum
import os

__all__ = ["Life", "boot_id", "group_alive", "life", "process_start", "still_ours"]


class Life(enum.Enum):
    """What is known of a recorded process (see the module for the rules)."""

    RUNS = "runs"
    GONE = "gone"
    UNKNOWN = "unknown"


_ENDED = (b"Z", b"X")  # a zombie (ended, not reaped yet) or dead


def boot_id() -> str | None:
    """This boot of this machine (Linux), or None."""
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            return f.read().strip()
    except OSError:
        return None


def _proc() -> bool:
    return os.path.isdir("/proc/self")


def _stat(pid: int) -> list[bytes] | None:
    """The fields of ``/proc/<pid>/stat`` after the command's name (the
    state first, the start time at index 19); None when there is no such
    entry. Raises OSError when the entry cannot be read."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
    except (FileNotFoundError, ProcessLookupError):
        return None
    # The name, in parentheses, may hold spaces and parentheses: the fields start after its last ')'.
    return data[data.rfind(b")") + 2 :].split()


def _start_of(fields: list[bytes]) -> int | None:
    return int(fields[19]) if len(fields) > 19 and fields[19].isdigit() else None


def process_start(pid: int) -> int | None:
    """The start time of the process that holds ``pid`` now, in clock ticks
    since boot (Linux; a zombie too), or None: no such process, unreadable,
    not Linux. What a record of a process keeps beside its pid."""
    try:
        fields = _stat(pid)
    except OSError:
        return None
    return _start_of(fields) if fields is not None else None


def life(pid: int, start: int | None = None) -> Life:
    """Whether process ``pid`` runs; with ``start`` (its recorded start
    time), whether the process that started then runs (see the module)."""
    if pid <= 0:
        return Life.UNKNOWN
    if not _proc():
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return Life.GONE
        except OSError:
            return Life.RUNS  # (someone else's process: it exists)
        return Life.RUNS
    try:
        fields = _stat(pid)
    except OSError:
        return Life.UNKNOWN
    if fields is None or (fields[:1] and fields[0] in _ENDED):
        return Life.GONE
    now = _start_of(fields)
    if start is not None and now is not None and now != start:
        return Life.GONE  # the pid was given to another process
    return Life.RUNS


def still_ours(pgid: int, start: object) -> bool:
    """Whether a process group recorded with its leader's ``start`` time may
    still be ours: its leader is that process (a zombie too), or gone
    (members keep the group's id). An id now held by a process that started
    at another time means ours is gone."""
    now = process_start(pgid)
    return now is None or start is None or now == start


def group_alive(pgid: int) -> bool:
    """Whether process group ``pgid`` has a member that has not ended (on
    Linux a group of zombies has ended; elsewhere ``killpg(pgid, 0)``
    decides). Scans ``/proc``: for a group whose end is awaited, not for a
    hot loop."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    if not _proc():
        return True
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            with contextlib.suppress(OSError, ValueError):
                fields = _stat(int(entry))
                if fields is not None and len(fields) > 2 and int(fields[2]) == pgid and fields[0] not in _ENDED:
                    return True
    return False

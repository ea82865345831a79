"""Units shared across the drivers of one workspace (see :mod:`.units`).

A :class:`~.units.UnitBook` shares a unit among the gates of one process. Two
drivers (two ``drive`` processes on one item, a ``verify`` beside a drive)
each have a book of their own; they share a unit through the workspace's
``.milepost/cache/unit-locks/``:

- a book that is to run a unit takes the unit's lock (``flock`` on
  ``<digest>.lock``); a lock another process holds means that process runs
  the unit now: the book waits for it (or, holding other units for one
  pytest session, leaves the unit for later rather than wait while holding
  them);
- a unit that passed leaves ``<digest>.pass``: where it passed (item,
  milestone, attempt) and the process that ran it, with its start time. Its
  pass reaches the store only when that attempt is recorded, so until then a
  book that finds no pass in the store takes the file's word **while that
  process lives**: a pass of a driver that died before recording it is not
  trusted (its attempt may never exist).

The kernel drops a dead process's locks, so a unit whose driver died runs
again. No Prefect, no store.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
from pathlib import Path

from milepost.gates.liveness import Life, life, process_start
from milepost.gates.outcome import CachedFrom

__all__ = ["UnitLocks"]


class UnitLocks:
    """The unit locks and passes of the workspace at ``root``, as one book holds them."""

    def __init__(self, root: Path) -> None:
        self.folder = root / ".milepost" / "cache" / "unit-locks"
        self._held: dict[str, int] = {}  # digest -> the descriptor holding its lock
        self.recording: set[str] = set()  # held while a record with that digest is written (see UnitBook.hold)

    def take(self, digest: str, *, wait: bool) -> bool:
        """Take the unit's lock: True once held here; False when another process holds it and ``wait`` is
        False (with ``wait``, returns once the other process let it go)."""
        if digest in self._held:
            return True
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.folder / f"{digest}.lock", os.O_RDWR | os.O_CREAT, 0o644)
        except OSError:
            return True  # no lock to take (a read-only workspace): the unit runs, as in one driver
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
        except BlockingIOError:
            os.close(fd)
            return False
        except OSError:
            os.close(fd)
            return True
        self._held[digest] = fd
        return True

    def release(self, digest: str) -> None:
        self.recording.discard(digest)
        fd = self._held.pop(digest, None)
        if fd is not None:
            with contextlib.suppress(OSError):
                os.close(fd)  # (closing drops the flock)

    def release_all(self) -> None:
        """Every lock still held here let go (a book whose drive ended: passes run ahead that no gate took, a
        record's lock a failed run never let go); the process may drive again (the MCP server)."""
        for digest in list(self._held):
            self.release(digest)

    def passed(self, digest: str) -> CachedFrom | None:
        """Where a live process passed the unit (its attempt not yet recorded, perhaps), else None."""
        try:
            data = json.loads((self.folder / f"{digest}.pass").read_text())
            pid, start = int(data["pid"]), data["start"]
            origin = CachedFrom(item=int(data["item"]), milestone=str(data["milestone"]), attempt=int(data["attempt"]))
        except (OSError, ValueError, KeyError, TypeError):
            return None
        if pid != os.getpid() and life(pid, start if isinstance(start, int) else None) is not Life.RUNS:
            return None
        return origin

    def keep(self, digest: str, origin: CachedFrom) -> None:
        """The unit passed here, as ``origin`` (best effort: a lost file costs another driver a run)."""
        data = {"pid": os.getpid(), "start": process_start(os.getpid()), **origin.model_dump()}
        path = self.folder / f"{digest}.pass"
        tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
            tmp.write_text(json.dumps(data))
            tmp.replace(path)
        except OSError:
            with contextlib.suppress(OSError):
                tmp.unlink()

"""Units of proof: a gate command run once per file (``each:``), each run a
unit whose result is kept under the digest of its command and its inputs.

A unit's **digest** covers what it runs (the command with ``{file}``
replaced, ``cwd``, ``env``, the effective timeout) and the content of its
inputs: for a ``.py`` file, what ``module:FILE`` stands for (the file, what
it imports at run time and, for a test file, its ``conftest.py`` files; see
:mod:`.imports`); for any other file, the file itself. It does not depend on
which milestone's gate runs it: every gate that includes the same unit in
the same state shares one result.

A :class:`UnitBook` is where a gate finds a unit's result before running it:
a pass kept in the store (``lookup``, given by the service layer), or a run
of this book's (one drive, one ``done``, one ``verify``): a unit another
gate of the same book is running is waited for, not run twice, and a unit
that failed in this book fails again without running (the same state fails
the same way). A unit whose inputs cannot be read has no digest: it always
runs and is never shared.
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Callable
from dataclasses import dataclass, field

from milepost.gates.inputs import Snapshot, spec_digest
from milepost.gates.outcome import CachedFrom, CommandResult, Outcome
from milepost.graph.models import GateCommand

__all__ = ["UnitBook", "unit_command", "unit_digest"]

FORMAT = "milepost-unit-1"


def unit_command(cmd: GateCommand, path: str) -> GateCommand:
    """The one command a unit runs: ``{file}`` replaced by ``path`` (quoted)."""
    return GateCommand(name=cmd.name, run=cmd.unit_run(path), cwd=cmd.cwd, env=cmd.env, timeout=cmd.timeout)


def unit_inputs(path: str) -> list[str]:
    """A unit's input entries: a Python file with what it imports, any other file alone."""
    if path.endswith(".py"):
        return [f"module:{path}"]
    return [path if "/" in path else f"./{path}"]


def unit_digest(snap: Snapshot, cmd: GateCommand, path: str, default_timeout: float | None) -> str | None:
    """The unit's digest now, or None when its inputs cannot all be read (or its file is missing)."""
    fp = snap.fingerprint(unit_inputs(path), spec_digest([unit_command(cmd, path)], default_timeout))
    if fp.digest is None or path not in fp.files:
        return None
    return hashlib.sha256(f"{FORMAT}\n{fp.digest}".encode()).hexdigest()


@dataclass
class _Slot:
    done: threading.Event = field(default_factory=threading.Event)
    result: CommandResult | None = None
    origin: CachedFrom | None = None


class UnitBook:
    """The units of one drive (or ``done``, or ``verify``): their results, and
    the passes kept in the store through ``lookup`` (digest -> where it passed)."""

    def __init__(self, lookup: Callable[[str], CachedFrom | None] | None = None, workers: int = 1) -> None:
        self._lookup = lookup
        self.workers = 1
        self.slots = threading.BoundedSemaphore(1)
        self.set_workers(workers)
        self._lock = threading.Lock()
        self._slots: dict[str, _Slot] = {}
        self.ran = 0  # units run by this book's gates
        self.reused = 0  # units answered without running

    def set_workers(self, n: int) -> None:
        """Up to ``n`` units run at once, across every gate of this book (the drive's ``--max-parallel``)."""
        self.workers = max(1, n)
        self.slots = threading.BoundedSemaphore(self.workers)

    def begin(self, digest: str) -> tuple[Outcome, CachedFrom] | None:
        """How the unit went before (passed in the store, or passed or failed in
        this book), waiting while another gate of this book runs it; None: the
        caller runs it and must call :meth:`end`."""
        while True:
            with self._lock:
                slot = self._slots.get(digest)
                if slot is None:
                    self._slots[digest] = _Slot()
                    break
            slot.done.wait()
            if slot.result is not None and slot.origin is not None:
                with self._lock:
                    self.reused += 1
                return slot.result.outcome, slot.origin
            # Its run was interrupted: take it over (the loop claims the free slot).
        try:
            source = self._lookup(digest) if self._lookup is not None else None
        except Exception:  # the store cannot say (a lost connection): the unit runs, that is all
            source = None
        if source is not None:
            with self._lock:  # nothing ran: the store's answer is this book's for the next asker too
                slot = self._slots[digest]
                slot.result, slot.origin = _passed(), source
                self.reused += 1
            slot.done.set()
            return Outcome.PASSED, source
        return None

    def end(self, digest: str, result: CommandResult | None, origin: CachedFrom | None) -> None:
        """The unit begun here ended: ``result`` (None when interrupted: another gate may run it)."""
        with self._lock:
            slot = self._slots.get(digest)
            if slot is None:
                return
            if result is None or origin is None or result.outcome not in (Outcome.PASSED, Outcome.FAILED):
                del self._slots[digest]  # nothing another gate may take (interrupted, or no origin to name)
            else:
                slot.result, slot.origin = result, origin
                self.ran += 1
        slot.done.set()


def _passed() -> CommandResult:
    return CommandResult(name="unit", run="", outcome=Outcome.PASSED, reason="exit 0")

"""Running the units of one ``each`` step of a gate attempt (see
:mod:`.units`): each unit found in the attempt's book (a pass of the store,
or a run of another gate of the same drive) or run here, in order."""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path

from milepost.gates import log_room
from milepost.gates.inputs import Snapshot
from milepost.gates.log_room import command_header
from milepost.gates.outcome import CachedFrom, CommandResult, Outcome
from milepost.gates.units import UnitBook, unit_command, unit_digest
from milepost.graph.models import GateCommand

__all__ = ["UnitRuns"]


class UnitRuns:
    """The units of one ``each`` command of an attempt: found in the book, or run."""

    def __init__(self, root: Path, book: UnitBook | None, origin: CachedFrom | None,
                 default_timeout: float | None) -> None:  # fmt: skip
        self.root = root
        self.book = book
        self.origin = origin
        self.default_timeout = default_timeout

    def _digest(self, snap: Snapshot, cmd: GateCommand, path: str, fd: int) -> str | None:
        try:
            return unit_digest(snap, cmd, path, self.default_timeout)
        except Exception as e:  # the unit still runs: it is only not shared
            log_room.note(fd, f"could not fingerprint unit {path}: {type(e).__name__}: {e}")
            return None

    def run(self, cmd: GateCommand, run_one: Callable[..., CommandResult], first: int, fd: int,
            stop: threading.Event | None) -> list[CommandResult]:  # fmt: skip
        """Each unit in turn; ``run_one(index=, cmd=)`` runs one (``first``: the index of the first)."""
        snap = Snapshot(self.root)
        out: list[CommandResult] = []
        for n, path in enumerate(cmd.each):
            one = unit_command(cmd, path)
            if (out and out[-1].outcome is Outcome.INTERRUPTED) or (stop is not None and stop.is_set()):
                out.append(CommandResult(name=cmd.name, run=one.run, outcome=Outcome.SKIPPED,
                                         reason="skipped: the attempt was interrupted", file=path))  # fmt: skip
                continue
            digest = self._digest(snap, cmd, path, fd)
            before = self.book.begin(digest) if self.book is not None and digest is not None else None
            if before is not None:
                out.append(_reused(one, path, digest, *before, fd))
                continue
            try:
                r = run_one(index=first + n, cmd=one).model_copy(update={"file": path, "unit": digest})
            except BaseException:
                if self.book is not None and digest is not None:
                    self.book.end(digest, None, None)
                raise
            if self.book is not None and digest is not None:
                self.book.end(digest, r, self.origin)
            out.append(r)
        snap.save()
        return out


def _reused(cmd: GateCommand, path: str, digest: str | None, outcome: Outcome, source: CachedFrom,
            fd: int) -> CommandResult:  # fmt: skip
    """A unit answered without running: passed (``cached``) or failed where ``source`` ran it."""
    if outcome is Outcome.PASSED:
        reason = f"cached: passed as {source.shown()} on the same command and inputs"
        out = Outcome.CACHED
    else:
        reason = f"failed as {source.shown()} on the same command and inputs (not run again)"
        out = Outcome.FAILED
    log_room.write(fd, f"{command_header(cmd)}milepost: {reason}\n")
    return CommandResult(name=cmd.name, run=cmd.run, outcome=out, reason=reason, tail=reason, file=path, unit=digest,
                         cached_from=source)  # fmt: skip

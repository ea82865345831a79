"""An attempt's files: where a gate attempt leaves its evidence on disk,
and the one place that names, writes, reads and recovers them.

An attempt of a milestone's gate has a log under the store's logs folder,
``item-I/MILESTONE/attempt-N.log``, and beside it:

- ``attempt-N.proc``: its processes, JSON lines appended by the gate
  supervisor (the process that started them, ``_supervisor_main.py``, given
  this path): each command's start (process group, start time, boot id)
  and end (how it ended, see :class:`~milepost.gates.outcome.ExitStatus`);
- ``attempt-N.result.json``: its verdict (a
  :class:`~milepost.gates.outcome.GateResult`), written when it ends;
- ``attempt-N.inputs.json``: the file list of its inputs' fingerprint,
  written before its first command starts;
- ``attempt-N.fix.log``: the fix hook run after it failed, with files of its
  own beside it (``.fix.proc``, ``.fix.result.json``);
- ``attempt-N.do.log``: the doer run before its gate (docs/doers.md), with
  ``.do.proc``, ``.do.result.json``, its prompt ``.do.prompt.md`` and the
  cost it reported, ``.do.cost.json``;
- ``attempt-N.unit-K.log`` (and ``.unit-K.proc``): unit K of an ``each``
  step while it runs, appended to the attempt's log and removed when it
  ends.

A driver that dies leaves these behind: :meth:`AttemptFiles.recover` reads
how its attempt ended from them (on the machine that ran it), and the
driver that takes its lease over fences the processes the ``.proc`` file
names (:mod:`milepost.service.takeover`).
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from milepost.gates.inputs import Fingerprint, spec_digest
from milepost.gates.outcome import CommandResult, ExitStatus, GateResult, Outcome, judge, verdict
from milepost.gates.units import unit_command
from milepost.graph.models import GateCommand

__all__ = ["TAIL_BYTES", "AttemptFiles", "process_records", "read_tail"]

TAIL_BYTES = 4096

_TRACEBACK = "Traceback (most recent call last):"


def read_tail(path: Path, start: int = 0, end: int | None = None, limit: int = TAIL_BYTES) -> str:
    """The last ``limit`` bytes of ``path[start:end]``, decoded with replacement.

    A tail cut from longer output opens at a line's start, and at the first
    traceback's start when one is in range (not mid-traceback on a ``^^^^``).
    """
    with open(path, "rb") as f:
        if end is None:
            end = f.seek(0, os.SEEK_END)
        begin = max(start, end - limit)
        # One byte more, to know whether the window opens at a line's start.
        f.seek(max(start, begin - 1))
        data = f.read(end - max(start, begin - 1))
    if begin == start:
        return data.decode("utf-8", errors="replace")
    nl = data.find(b"\n")
    if nl == -1 or not data[nl + 1 :].strip():  # one line longer than the window: keep its end
        return data[1:].decode("utf-8", errors="replace")
    text = data[nl + 1 :].decode("utf-8", errors="replace")
    tb = text.find(_TRACEBACK)
    if tb > 0 and text[tb - 1] == "\n":
        text = text[tb:]
    return text


def process_records(proc: Path) -> list[dict[str, Any]]:
    """The records of an attempt's ``.proc`` file, as the gate supervisor
    appended them (missing: none; a torn line is skipped)."""
    try:
        text = proc.read_text()
    except OSError:
        return []
    out = []
    for line in text.splitlines():
        with contextlib.suppress(ValueError):
            rec = json.loads(line)
            if isinstance(rec, dict):
                out.append(rec)
    return out


@dataclass(frozen=True)
class AttemptFiles:
    """The files of one attempt, named by its log (see the module)."""

    log: Path

    @classmethod
    def of(cls, logs: Path, item: int, milestone: str, attempt: int) -> AttemptFiles:
        """Attempt ``attempt`` of ``milestone`` of work item ``item``, under the store's ``logs`` folder."""
        return cls(logs / f"item-{item}" / milestone / f"attempt-{attempt}.log")

    @property
    def _stem(self) -> str:
        return str(self.log).removesuffix(".log")

    @property
    def proc(self) -> Path:
        """Its processes' starts and ends, as the gate supervisor recorded them."""
        return Path(self._stem + ".proc")

    @property
    def result(self) -> Path:
        """Its verdict."""
        return Path(self._stem + ".result.json")

    @property
    def inputs(self) -> Path:
        """The file list of its inputs' fingerprint."""
        return Path(self._stem + ".inputs.json")

    @property
    def fix(self) -> AttemptFiles:
        """The files of the fix hook run after this attempt failed."""
        return AttemptFiles(Path(self._stem + ".fix.log"))

    @property
    def do(self) -> AttemptFiles:
        """The files of the doer run before this attempt's gate (its log, and
        beside it its :attr:`prompt` and :attr:`cost`)."""
        return AttemptFiles(Path(self._stem + ".do.log"))

    @property
    def prompt(self) -> Path:
        """A doer's prompt (of the files :attr:`do` names)."""
        return Path(self._stem + ".prompt.md")

    @property
    def cost(self) -> Path:
        """What a doer says it cost (of the files :attr:`do` names)."""
        return Path(self._stem + ".cost.json")

    def unit(self, n: int) -> AttemptFiles:
        """The files of the ``n``-th unit of an ``each`` step run in this
        attempt (a log and ``.proc`` of its own, appended to the attempt's
        log and removed when the unit ends)."""
        return AttemptFiles(Path(f"{self._stem}.unit-{n}.log"))

    def previous(self) -> AttemptFiles | None:
        """The files of the attempt before this one (None for a first attempt)."""
        stem, sep, number = self._stem.rpartition("attempt-")
        if not sep or not number.isdigit() or int(number) <= 1:
            return None
        return AttemptFiles(Path(f"{stem}attempt-{int(number) - 1}.log"))

    def discard(self) -> None:
        """Remove the log and ``.proc`` (best effort)."""
        for path in (self.log, self.proc):
            with contextlib.suppress(OSError):
                path.unlink()

    # -- the verdict ---------------------------------------------------------------

    def write_result(self, result: GateResult) -> None:
        """Write the verdict (whole or not at all). A full disk is not raised:
        the verdict reaches the store from memory (the gate task's box,
        flows/gate_task.py); only a later recovery from the files would miss it."""
        tmp = self.result.with_name(self.result.name + ".tmp")
        try:
            tmp.write_text(result.model_dump_json())
            tmp.replace(self.result)
        except OSError:
            with contextlib.suppress(OSError):
                tmp.unlink()

    def read_result(self) -> GateResult | None:
        """The verdict, None when none was written (or it cannot be read)."""
        with contextlib.suppress(OSError, ValueError):
            return GateResult.model_validate_json(self.result.read_text())
        return None

    # -- the inputs ----------------------------------------------------------------

    def write_inputs(self, fp: Fingerprint) -> None:
        """The file list of the fingerprint the attempt runs on, for the recorder (best effort)."""
        with contextlib.suppress(OSError):
            self.inputs.write_text(
                json.dumps({"inputs_digest": fp.inputs_digest, "files": fp.files}, separators=(",", ":"))
            )

    def read_inputs(self, inputs_digest: str) -> dict[str, str] | None:
        """The file list written before the attempt started, if it is the one named."""
        with contextlib.suppress(OSError, ValueError, TypeError, KeyError):
            data = json.loads(self.inputs.read_text())
            if data["inputs_digest"] == inputs_digest:
                return dict(data["files"])
        return None

    def recorded_fingerprint(
        self, commands: Sequence[GateCommand], default_timeout: float | None
    ) -> Fingerprint | None:
        """The fingerprint the attempt took as it started, from its file list."""
        with contextlib.suppress(OSError, ValueError, TypeError, KeyError):
            data = json.loads(self.inputs.read_text())
            fp = Fingerprint(spec=spec_digest(commands, default_timeout), files=dict(data["files"]))
            if fp.inputs_digest == data["inputs_digest"]:
                return fp
        return None

    # -- the processes -------------------------------------------------------------

    def processes(self) -> list[dict[str, Any]]:
        """The records of the ``.proc`` file (see :func:`process_records`)."""
        return process_records(self.proc)

    def starts(self, cmd: int | None = None) -> list[dict[str, Any]]:
        """The start records (of the process with index ``cmd``; None: all),
        in the order they were written."""
        return [r for r in self.processes() if r.get("event") == "start" and (cmd is None or r.get("cmd") == cmd)]

    def ran_for(self) -> float:
        """How long its processes ran, in seconds, read from the files alone
        (a driver that died recorded nothing): the durations of the ends the
        gate supervisor recorded; when it recorded none (it died too), from
        the prompt or the log's first write to the last write of its log or
        ``.proc`` file."""
        ends = [r for r in self.processes() if r.get("event") == "end"]
        if ends:
            return sum(float(r.get("duration") or 0.0) for r in ends)
        times = [p.stat().st_mtime for p in (self.log, self.proc) if p.exists()]
        first = [p.stat().st_mtime for p in (self.prompt,) if p.exists()]
        if not times or not first:
            return 0.0
        return max(0.0, max(times) - min(first))

    # -- recovery ------------------------------------------------------------------

    def recover(
        self, commands: Sequence[GateCommand], started: datetime, *, default_timeout: float | None = None
    ) -> GateResult:
        """How the attempt ended when its driver died (read on the machine
        that ran it): its verdict if its driver wrote one, else what its
        supervisor recorded of each command; a command that did not end on
        its own makes the attempt ``interrupted``. The fingerprint comes
        from the file list written before the first command started."""
        written = self.read_result()
        if written is not None:
            return written
        ends = {r.get("cmd"): r for r in self.processes() if r.get("event") == "end"}
        tail = ""
        with contextlib.suppress(OSError):
            tail = read_tail(self.log)
        results: list[CommandResult] = []
        # The processes in the order they were started: each command, or each unit of an ``each`` command.
        flat = [u for c in commands for u in ([unit_command(c, f) for f in c.each] or [c])]
        for i, cmd in enumerate(flat):
            end = ends.get(i)
            if end is None:
                cut = CommandResult(
                    name=cmd.name, run=cmd.run, outcome=Outcome.INTERRUPTED, reason="interrupted", tail=tail
                )
                results.append(cut)
                break
            status = ExitStatus.from_dict(end)
            outcome, reason = judge(status, cmd.timeout, tail)
            results.append(CommandResult.ended(cmd.name, cmd.run, status, outcome, reason, tail))
            if outcome is not Outcome.PASSED:
                break
        duration = sum(r.duration for r in results)
        out = verdict(results, started, datetime.now(UTC), duration, str(self.log))
        fp = self.recorded_fingerprint(commands, default_timeout)
        if fp is not None:
            out = out.model_copy(
                update={"fingerprint": fp.digest, "inputs_digest": fp.inputs_digest, "inputs_files": len(fp.files)}
            )
        return out.model_copy(update={"host": None})

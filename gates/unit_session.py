"""Several pytest units in one pytest session (see :mod:`.unit_blocks`).

A step whose units all run pytest on ``.py`` files runs the units it has to
run (those no pass stands in for) as one pytest process, or as many as the
book has workers, each over its share of the files: ``{file}`` replaced by
them all. The plugin switches coverage's context per test file and reports
each file's tests, so each file is still a unit of its own: its outcome
(failed when one of its tests, or its collection, failed, or when it has no
test, as ``pytest FILE`` alone would exit 5), its record and its pass. Code
run while collecting (imports) or while setting up a session or package
fixture counts for every file of the session (such a fixture serves the
files after the one that set it up), a test
file's own module code for itself only. Collection errors do not stop the
session (``--continue-on-collection-errors``). A session that ends in
another way (interrupted, an internal error, a ``-x`` that stopped it) gives
no result for the files it did not report: those run one by one.
"""

from __future__ import annotations

import json
import os
import shlex
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from milepost.gates.outcome import CommandResult, Outcome
from milepost.gates.unit_blocks import Watch
from milepost.gates.units import unit_command
from milepost.graph.models import GateCommand

__all__ = ["Session"]

USAGE_ERROR = 4  # pytest's exit code for a usage error (coverage.py missing in the test interpreter)


@dataclass
class Session:
    """One pytest session over ``paths``, each a unit of ``cmd``."""

    root: Path
    cmd: GateCommand
    paths: Sequence[str]
    default_timeout: float | None
    env_tag: str = ""  # the environment its units run in (gates/unit_blocks.py: env_tag)
    hold: Callable[[str], object] | None = None  # before a record is written (gates/unit_blocks.py: Watch.hold)
    watch: Watch = field(init=False)

    def __post_init__(self) -> None:
        self.watch = Watch(self.root, self.cmd, self.paths[0], self.default_timeout, self.env_tag)

    def command(self) -> GateCommand:
        files = " ".join(shlex.quote(p) for p in self.paths)
        return GateCommand(name=self.cmd.name, run=self.cmd.run.replace("{file}", files), cwd=self.cmd.cwd)

    def timeout(self) -> float | None:
        one = self.cmd.timeout if self.cmd.timeout is not None else self.default_timeout
        return None if one is None else one * len(self.paths)

    def env(self, base: Mapping[str, str]) -> dict[str, str]:
        return self.watch.env({**base, **self.cmd.env}, session=True)

    def results(self, ran: CommandResult) -> dict[str, CommandResult]:
        """Each file's result, from the session's run (a file missing: no result, it runs alone)."""
        try:
            return self._results(ran)
        finally:
            self.watch.out.unlink(missing_ok=True)

    def _results(self, ran: CommandResult) -> dict[str, CommandResult]:
        if ran.outcome is Outcome.INTERRUPTED:
            return {}
        if ran.exit_code == USAGE_ERROR:  # every unit fails as it would alone (coverage.py missing, a bad option)
            return {p: self._unit(p, ran, Outcome.FAILED, ran.duration, ran.tail, ran.reason) for p in self.paths}
        try:
            found = json.loads(self.watch.out.read_text())
            incomplete = bool(found.get("incomplete"))  # outcomes without records (pytest-xdist, pytest-cov)
            units = {os.path.realpath(k): v for k, v in dict(found["units"]).items()}
            read = dict(found.get("read", {}))
        except (OSError, ValueError, KeyError, TypeError):
            return {}
        out: dict[str, CommandResult] = {}
        for path in self.paths:
            unit = units.get(os.path.realpath(self.root / path))
            if unit is None:
                continue
            try:
                out[path] = self._file(path, unit, ran, read, incomplete)
            except (KeyError, TypeError, ValueError):  # a file the session reported oddly: it runs alone
                continue
        return out

    def _file(
        self, path: str, unit: dict[str, Any], ran: CommandResult, read: dict[str, str], incomplete: bool
    ) -> CommandResult:
        """One file's result from the session's report (its record kept when it passed)."""
        failed = bool(unit["failed"]) or not unit["tests"]
        tail = "\n".join(unit["failures"])[-4000:] or ("" if not failed else "no tests ran in this file")
        outcome, reason = (Outcome.FAILED, "exit 1") if failed else (Outcome.PASSED, "exit 0")
        r = self._unit(path, ran, outcome, float(unit["duration"]), tail, reason)
        if not failed and not incomplete:
            w = Watch(self.root, self.cmd, path, self.default_timeout, self.env_tag, self.hold)
            try:
                record = w.record_of(unit["files"], read)
            except Exception:  # no record: the unit keeps its import-derived digest
                record = None
            if record is not None:
                w.keep(record)
                r = r.model_copy(update={"unit": record.digest})
        return r

    def _unit(
        self, path: str, ran: CommandResult, outcome: Outcome, duration: float, tail: str, reason: str
    ) -> CommandResult:
        code = 0 if outcome is Outcome.PASSED else ran.exit_code if ran.exit_code == USAGE_ERROR else 1
        return CommandResult(
            name=self.cmd.name,
            run=unit_command(self.cmd, path).run,
            outcome=outcome,
            exit_code=code,
            duration=duration,
            reason=f"{reason} (one pytest session of {len(self.paths)} test files)",
            tail=tail,
        )

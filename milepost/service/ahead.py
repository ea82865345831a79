"""Units run ahead of their gates (see :mod:`milepost.gates.units`): what a
drive gives its book to run while a worker is idle, and how one runs.

The jobs are the units of the milestones the drive may still run and
cannot start yet (in its ``--until`` scope, waiting on their
dependencies), in the order of their ids: the same step,
file and timeout as their gate's, so a unit run ahead has the digest the
gate will ask for. One runs as a gate command of its own, under this
process's gate supervisor, in the workspace root, with the milestone's
``MILEPOST_ITEM``, ``MILEPOST_MILESTONE`` and ``MILEPOST_WORKSPACE`` (no
``MILEPOST_ATTEMPT``: no attempt has begun), its log in the drive's folder
``.milepost/ahead/<store id>/<owner>/`` until a gate takes it (or the drive ends).
Units of pytest on ``.py`` files with the same step and timeout run
together (:meth:`Ahead.together`), as one pytest session
(:mod:`milepost.gates.unit_session`), whatever milestones they are for: a
unit's result does not depend on the milestone whose gate runs it, so such a
session has no ``MILEPOST_MILESTONE`` when its units are of several. Each
unit's log is the session's output, with a line saying so.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import threading
from collections.abc import Callable, Hashable, Sequence
from pathlib import Path

from milepost.gates.command import run_gate
from milepost.gates.inputs import Snapshot
from milepost.gates.outcome import CommandResult
from milepost.gates.unit_blocks import coverable, env_tag, unit_state, watched
from milepost.gates.unit_session import Session
from milepost.gates.units import AheadJob, unit_command
from milepost.graph.dag import WorkGraph
from milepost.graph.status import MilestoneStatus
from milepost.service._tx import Context

__all__ = ["Ahead"]

_WAITING = (MilestoneStatus.PENDING, MilestoneStatus.NEEDS_FIX)  # (not claimed, done, stuck or a hypothesis)


class Ahead:
    """The units one drive may run ahead: its jobs, their digests now, and a run."""

    def __init__(self, ctx: Context, item: int, folder: Path, hold: Callable[[str], object] | None = None) -> None:
        self.ctx = ctx
        self.item = item
        self.folder = folder
        self.hold = hold  # the book's, called before a unit's record is written (gates/unit_blocks.py: Watch.hold)

    @staticmethod
    def jobs(g: WorkGraph, scope: set[str] | None) -> list[AheadJob]:
        """Every unit of the milestones waiting on others (not done, not ready;
        in ``scope``, with their cache on), by milestone id, each once."""
        out: list[AheadJob] = []
        seen: set[tuple[str, str, str]] = set()
        for m in sorted(g, key=lambda m: m.id):
            if m.status not in _WAITING or not m.cache or (scope is not None and m.name not in scope):
                continue  # (cache: false says its gate's results are not a function of its inputs)
            if g.is_ready(m.name):
                continue  # its gate starts now: its units are its own to run
            for cmd in m.gate:
                step = cmd.model_dump_json(exclude={"each"}) if cmd.each else ""
                for path in cmd.each:
                    key = (step, path, str(m.timeout))
                    if key not in seen:
                        seen.add(key)
                        out.append(AheadJob(cmd=cmd, path=path, milestone=m.name, timeout=m.timeout))
        return out

    def digest(self, job: AheadJob) -> str | None:
        snap = Snapshot(self.ctx.store.root)
        try:
            return unit_state(snap, job.cmd, job.path, job.timeout).digest
        finally:
            snap.save()

    @staticmethod
    def together(job: AheadJob) -> Hashable | None:
        """Units with the same key may run ahead in one pytest session; None: alone."""
        if not coverable(job.cmd, job.path):
            return None
        return (job.cmd.model_dump_json(exclude={"each"}), job.timeout)

    def run(
        self, jobs: Sequence[AheadJob], digests: Sequence[str], stop: threading.Event
    ) -> list[tuple[CommandResult | None, Path | None]]:
        """``jobs`` run ahead in one run: one command, or several pytest units in one session."""
        self.folder.mkdir(parents=True, exist_ok=True)
        if len(jobs) == 1:
            return [self._one(jobs[0], digests[0], stop)]
        return self._session(jobs, digests, stop)

    def _env(self, jobs: Sequence[AheadJob]) -> dict[str, str]:
        env = {"MILEPOST_ITEM": str(self.item), "MILEPOST_WORKSPACE": str(self.ctx.store.root)}
        if len({job.milestone for job in jobs}) == 1:
            env["MILEPOST_MILESTONE"] = jobs[0].milestone
        return env

    def _one(self, job: AheadJob, digest: str, stop: threading.Event) -> tuple[CommandResult, Path | None]:
        log = self.folder / f"{digest[:16]}.log"
        env = self._env([job])
        root = Path(self.ctx.store.root)
        one = unit_command(job.cmd, job.path)
        # Under coverage, as its gate would run it, its record kept under its environment's key as the gate's.
        snap = Snapshot(root)
        watch = watched(root, job.cmd, job.path, job.timeout, env_tag(snap, job.cmd), self.hold)
        snap.save()
        if watch is not None:
            env = watch.env({**os.environ, **env, **one.env})
            one = one.model_copy(update={"env": {}})  # (in env already: coverage's PYTHONPATH comes after it)
        result = run_gate([one], log, default_cwd=root, env=env, default_timeout=job.timeout, stop=stop)
        done = result.commands[0]
        return (watch.finish(done) if watch is not None else done), log

    def _session(
        self, jobs: Sequence[AheadJob], digests: Sequence[str], stop: threading.Event
    ) -> list[tuple[CommandResult | None, Path | None]]:
        root = Path(self.ctx.store.root)
        snap = Snapshot(root)
        tag = env_tag(snap, jobs[0].cmd)
        snap.save()
        session = Session(root, jobs[0].cmd, [job.path for job in jobs], jobs[0].timeout, tag, self.hold)
        log = self.folder / f"{digests[0][:16]}-session.log"
        env = session.env({**os.environ, **self._env(jobs)})
        result = run_gate(
            [session.command()], log, default_cwd=root, env=env, default_timeout=session.timeout(), stop=stop
        )
        found = session.results(result.commands[0])
        out: list[tuple[CommandResult | None, Path | None]] = []
        for job, digest in zip(jobs, digests, strict=True):
            r = found.get(job.path)
            own = self.folder / f"{digest[:16]}.log"
            if r is not None:
                _session_log(log, own, job.path, len(jobs))
            out.append((r, own if r is not None else None))
        log.unlink(missing_ok=True)
        return out

    def clear(self) -> None:
        """The logs of units run ahead that no gate took."""
        shutil.rmtree(self.folder, ignore_errors=True)


def _session_log(session: Path, own: Path, path: str, n: int) -> None:
    """A unit's log when it ran ahead in a session: a line saying so, then the session's output."""
    with open(own, "wb") as out:
        out.write(f"milepost: {path} ran in one pytest session of {n} test files; its output:\n".encode())
        with contextlib.suppress(OSError), open(session, "rb") as f:
            shutil.copyfileobj(f, out)

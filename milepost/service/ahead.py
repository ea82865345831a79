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
"""

from __future__ import annotations

import os
import shutil
import threading
from pathlib import Path

from milepost.gates.command import run_gate
from milepost.gates.inputs import Snapshot
from milepost.gates.outcome import CommandResult
from milepost.gates.unit_blocks import env_tag, unit_state, watched
from milepost.gates.units import AheadJob, unit_command
from milepost.graph.dag import WorkGraph
from milepost.graph.status import MilestoneStatus
from milepost.service._tx import Context

__all__ = ["Ahead"]

_WAITING = (MilestoneStatus.PENDING, MilestoneStatus.NEEDS_FIX)  # (not claimed, done, stuck or a hypothesis)


class Ahead:
    """The units one drive may run ahead: its jobs, their digests now, and a run."""

    def __init__(self, ctx: Context, item: int, folder: Path) -> None:
        self.ctx = ctx
        self.item = item
        self.folder = folder

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

    def run(self, job: AheadJob, digest: str, stop: threading.Event) -> tuple[CommandResult, Path | None]:
        self.folder.mkdir(parents=True, exist_ok=True)
        log = self.folder / f"{digest[:16]}.log"
        env = {
            "MILEPOST_ITEM": str(self.item),
            "MILEPOST_MILESTONE": job.milestone,
            "MILEPOST_WORKSPACE": str(self.ctx.store.root),
        }
        root = Path(self.ctx.store.root)
        one = unit_command(job.cmd, job.path)
        # Under coverage, as its gate would run it, its record kept under its environment's key as the gate's.
        snap = Snapshot(root)
        watch = watched(root, job.cmd, job.path, job.timeout, env_tag(snap, job.cmd))
        snap.save()
        if watch is not None:
            env = watch.env({**os.environ, **env, **one.env})
            one = one.model_copy(update={"env": {}})  # (in env already: coverage's PYTHONPATH comes after it)
        result = run_gate([one], log, default_cwd=root, env=env, default_timeout=job.timeout, stop=stop)
        done = result.commands[0]
        return (watch.finish(done) if watch is not None else done), log

    def clear(self) -> None:
        """The logs of units run ahead that no gate took."""
        shutil.rmtree(self.folder, ignore_errors=True)

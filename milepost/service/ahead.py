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

Outside the workspace (the drive's gates moved to its integration checkout:
docs/doers.md), a unit runs ahead there as its gate would: with the import
rule's ``PYTHONPATH`` (:func:`milepost.gates.judge.import_rule`), its digest
taken with it; a step the rule refuses (its python would import a package
from elsewhere) does not run ahead (its gate is refused in turn). A unit
whose digest was taken in another checkout than the one the drive works in
when its run starts is not run.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import threading
from collections.abc import Callable, Collection, Hashable, Iterator, Sequence
from pathlib import Path

from milepost.gates.command import run_gate
from milepost.gates.inputs import Snapshot
from milepost.gates.judge import ImportRule, import_rule
from milepost.gates.outcome import CommandResult
from milepost.gates.unit_blocks import coverable, env_tag, unit_state, watched
from milepost.gates.unit_session import Session
from milepost.gates.units import AheadJob, UnitBook, unit_command
from milepost.graph.dag import WorkGraph
from milepost.graph.status import MilestoneStatus
from milepost.service._tx import Context

__all__ = ["AHEAD_START_WAIT", "Ahead", "running_ahead"]

# How long a re-proof (a drive's first gates, verify's) waits for the units run ahead to start their first run
# (they take the book's idle workers first: every stale gate's changed units run together); past it the gates
# start anyway.
AHEAD_START_WAIT = 5.0

_WAITING = (MilestoneStatus.PENDING, MilestoneStatus.NEEDS_FIX)  # (not claimed, done, stuck or a hypothesis)


class Ahead:
    """The units one drive may run ahead: its jobs, their digests now, and a run."""

    def __init__(
        self,
        ctx: Context,
        item: int,
        folder: Path,
        *,
        workspace: Path | None = None,
        packages: Sequence[str] = (),
        hold: Callable[[str], object] | None = None,
    ) -> None:
        self.ctx = ctx  # (its store's root: where the drive's gates run now; DriveSession.work_in moves it)
        self.item = item
        self.folder = folder
        self.workspace = Path(ctx.store.root) if workspace is None else workspace
        self.packages = tuple(packages)  # what the plan's module: entries name (the import rule checks them)
        self.hold = hold  # the book's, called before a unit's record is written (gates/unit_blocks.py: Watch.hold)
        self._lock = threading.Lock()
        self._rules: dict[tuple[str, str], ImportRule] = {}  # (root, step) -> its import rule
        self._roots: dict[str, str] = {}  # digest -> the root it was taken in
        self._scan: tuple[str, Snapshot] | None = None  # (root, the snapshot of the digests taken since the last run)

    @staticmethod
    def jobs(g: WorkGraph, scope: set[str] | None, reprove: Collection[str] = ()) -> list[AheadJob]:
        """Every unit of the milestones waiting on others (not done, not ready;
        in ``scope``, with their cache on), and of the stale ones the drive will
        re-prove (``reprove``: their changed units run ahead together rather than
        one pytest process per gate), each once: the stale ones' first (a drive
        re-proves before it goes on), then by milestone id."""
        out: list[AheadJob] = []
        seen: set[tuple[str, str, str]] = set()
        for m in sorted(g, key=lambda m: (m.name not in reprove, m.id)):
            waiting = m.status in _WAITING or (m.status is MilestoneStatus.DONE and m.name in reprove)
            if not waiting or not m.cache or (scope is not None and m.name not in scope):
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

    def _base(self, root: Path, job: AheadJob) -> dict[str, str] | None:
        """The environment a unit of ``job`` runs ahead with in ``root`` (this
        process's, and outside the workspace the import rule's); None: refused."""
        if root.resolve() == self.workspace.resolve():
            return dict(os.environ)
        step = job.cmd.model_dump_json(exclude={"each"})
        with self._lock:
            rule = self._rules.get((str(root), step))
        if rule is None:
            env = {**os.environ, "MILEPOST_WORKSPACE": str(root)}
            rule = import_rule(root, self.packages, [unit_command(job.cmd, job.path)], env)
            with self._lock:
                self._rules[(str(root), step)] = rule
        return None if rule.refusal is not None else {**os.environ, **rule.env}

    def digest(self, job: AheadJob) -> str | None:
        root = Path(self.ctx.store.root)
        base = self._base(root, job)
        if base is None:
            return None  # (its gate is refused: nothing to run ahead)
        found = unit_state(self._snapshot(root), job.cmd, job.path, job.timeout, base).digest
        if found is not None:
            with self._lock:
                self._roots[found] = str(root)
        return found

    def _snapshot(self, root: Path) -> Snapshot:
        """One snapshot for the digests taken between two runs (a scan of the book's jobs: gates/units.py,
        ``_batch``), in ``root``. A snapshot per digest listed the workspace, read its environments and its
        runner configuration and wrote the stat cache again for each unit: most of the 0.37 s before a click
        no-op drive's first run ahead (docs/benchmarks.md)."""
        with self._lock:
            if self._scan is None or self._scan[0] != str(root):
                self._scan = (str(root), Snapshot(root))
            return self._scan[1]

    def _end_scan(self) -> None:
        """A run begins (it may change files) or the drive ends: the next digest takes a snapshot afresh."""
        with self._lock:
            scan, self._scan = self._scan, None
        if scan is not None:
            scan[1].save()

    def weight(self, job: AheadJob) -> float:
        """A unit's expected run time against the others': its file's size (0 when it cannot be read)."""
        try:
            return float(os.stat(os.path.join(self.ctx.store.root, job.path)).st_size)
        except (OSError, ValueError):
            return 0.0

    @staticmethod
    def together(job: AheadJob) -> Hashable | None:
        """Units with the same key may run ahead in one pytest session; None: alone."""
        if not coverable(job.cmd, job.path):
            return None
        return (job.cmd.model_dump_json(exclude={"each"}), job.timeout)

    def run(
        self, jobs: Sequence[AheadJob], digests: Sequence[str], stop: threading.Event
    ) -> list[tuple[CommandResult | None, Path | None]]:
        """``jobs`` run ahead in one run: one command, or several pytest units in one session
        (in the checkout the drive works in now: a unit whose digest was taken in another is not run)."""
        self._end_scan()
        root = Path(self.ctx.store.root)
        with self._lock:
            here = [self._roots.pop(d, None) == str(root) for d in digests]
        base = self._base(root, jobs[0]) if any(here) else None
        if base is None:
            return [(None, None)] * len(jobs)
        mine = [(job, d) for job, d, ok in zip(jobs, digests, here, strict=True) if ok]
        self.folder.mkdir(parents=True, exist_ok=True)
        ran: dict[str, tuple[CommandResult | None, Path | None]]
        if len(mine) == 1:
            ran = {mine[0][1]: self._one(root, base, mine[0][0], mine[0][1], stop)}
        else:
            found = self._session(root, base, [j for j, _ in mine], [d for _, d in mine], stop)
            ran = {d: r for (_, d), r in zip(mine, found, strict=True)}
        return [ran.get(d, (None, None)) for d in digests]

    def _env(self, root: Path, jobs: Sequence[AheadJob]) -> dict[str, str]:
        env = {"MILEPOST_ITEM": str(self.item), "MILEPOST_WORKSPACE": str(root)}
        if len({job.milestone for job in jobs}) == 1:
            env["MILEPOST_MILESTONE"] = jobs[0].milestone
        return env

    def _one(
        self, root: Path, base: dict[str, str], job: AheadJob, digest: str, stop: threading.Event
    ) -> tuple[CommandResult, Path | None]:
        log = self.folder / f"{digest[:16]}.log"
        env = {**base, **self._env(root, [job])}
        one = unit_command(job.cmd, job.path)
        # Under coverage, as its gate would run it, its record kept under its environment's key as the gate's.
        snap = Snapshot(root)
        watch = watched(root, job.cmd, job.path, job.timeout, env_tag(snap, job.cmd, base), self.hold)
        snap.save()
        if watch is not None:
            env = watch.env({**env, **one.env})
            one = one.model_copy(update={"env": {}})  # (in env already: coverage's PYTHONPATH comes after it)
        result = run_gate(
            [one], log, default_cwd=root, env=env, inherit_env=False, default_timeout=job.timeout, stop=stop
        )
        done = result.commands[0]
        return (watch.finish(done) if watch is not None else done), log

    def _session(
        self, root: Path, base: dict[str, str], jobs: Sequence[AheadJob], digests: Sequence[str], stop: threading.Event
    ) -> list[tuple[CommandResult | None, Path | None]]:
        snap = Snapshot(root)
        tag = env_tag(snap, jobs[0].cmd, base)
        snap.save()
        session = Session(root, jobs[0].cmd, [job.path for job in jobs], jobs[0].timeout, tag, self.hold)
        log = self.folder / f"{digests[0][:16]}-session.log"
        env = session.env({**base, **self._env(root, jobs)})
        result = run_gate(
            [session.command()],
            log,
            default_cwd=root,
            env=env,
            inherit_env=False,
            default_timeout=session.timeout(),
            stop=stop,
        )
        found = session.results(result.commands[0])
        out: list[tuple[CommandResult | None, Path | None]] = []
        for job, digest in zip(jobs, digests, strict=True):
            r = found.get(job.path)
            own = self.folder / f"{digest[:16]}.log"
            if r is not None:
                with contextlib.suppress(OSError):  # (its record is written: a log lost costs no result)
                    _session_log(log, own, job.path, len(jobs))
            out.append((r, own if r is not None else None))
        log.unlink(missing_ok=True)
        return out

    def clear(self) -> None:
        """The logs of units run ahead that no gate took (and the last scan's snapshot, its stat cache saved)."""
        self._end_scan()
        shutil.rmtree(self.folder, ignore_errors=True)


def _session_log(session: Path, own: Path, path: str, n: int) -> None:
    """A unit's log when it ran ahead in a session: a line saying so, then the session's output."""
    with open(own, "wb") as out:
        out.write(f"milepost: {path} ran in one pytest session of {n} test files; its output:\n".encode())
        with contextlib.suppress(OSError), open(session, "rb") as f:
            shutil.copyfileobj(f, out)


@contextlib.contextmanager
def running_ahead(
    ctx: Context,
    item: int,
    units: UnitBook,
    g: WorkGraph,
    owner: str,
    *,
    scope: set[str] | None = None,
    reprove: Collection[str] = (),
    workspace: Path | None = None,
) -> Iterator[Ahead]:
    """While the block runs, ``units``' idle workers run the units of ``g``'s milestones yet to run (and of the
    stale ones in ``reprove``) ahead of their gates: :meth:`Ahead.jobs`, split by :meth:`Ahead.weight`. Their
    logs wait in ``owner``'s folder of the store's ``ahead`` evidence until a gate takes them; at its end the
    runs still going are stopped, and the logs no gate took removed."""
    from milepost.gates.judge import named_packages

    folder = ctx.store.evidence_dir("ahead") / owner.replace(":", "-")
    packages = named_packages(e for m in g for e in m.inputs)  # (the import rule's, outside the workspace)
    ahead = Ahead(ctx, item, folder, workspace=workspace, packages=packages, hold=units.hold)
    try:
        jobs = Ahead.jobs(g, scope, reprove)
        with units.ahead(jobs, ahead.digest, ahead.run, ahead.together, ahead.weight):
            yield ahead
    finally:
        ahead.clear()

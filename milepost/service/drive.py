"""What a drive loop keeps while it runs: :class:`DriveSession` owns the
item's whole graph (cached between its transactions and kept in step with
its own writes, so a claim costs O(log n)), the milestones it holds out of
the schedule (retry delays, ``--until``, failures waiting for a change of
their inputs), the stale milestones it re-proves, and the lease keeper of
its gates.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from milepost._text import last_lines
from milepost.errors import NotFoundError, TransitionError
from milepost.events import DriveSummary, Failure, MilestoneSummary
from milepost.gates._crash import crash_point
from milepost.gates.command import GateResult
from milepost.gates.inputs import Fingerprint, Snapshot
from milepost.gates.outcome import CachedFrom
from milepost.graph.dag import WorkGraph, display_status
from milepost.graph.models import Milestone, WorkItem
from milepost.graph.status import Action, DisplayStatus, MilestoneStatus
from milepost.graph.words import count
from milepost.results import Claim, DoneResult, StaleInfo
from milepost.retry import retrying
from milepost.service import claims, items, proofs, takeover
from milepost.service._tx import Context, GraphCache, Tx, write
from milepost.service.leases import ExpiredLease, LeaseKeeper, take_lease
from milepost.service.takeover import HeldElsewhere, held_by_others

if TYPE_CHECKING:
    from milepost.service import Service
    from milepost.service.ahead import Ahead

__all__ = ["UNCHANGED", "DriveSession", "nothing_to_run", "summarize"]

S = MilestoneStatus


class DriveSession:
    """One drive of one work item by one ``owner`` (a lease holder's name).
    ``scope``: the milestones it may run (``--until``); None: all."""

    def __init__(
        self, ctx: Context, item: int, owner: str, *, use_cache: bool = True, scope: Iterable[str] | None = None
    ) -> None:
        self.ctx = ctx
        self.workspace = Path(ctx.store.root)  # (ctx's root moves with work_in; this one never does)
        self.item = item
        self.owner = owner
        self.use_cache = use_cache
        self.scope = set(scope) if scope is not None else None
        self.cache = GraphCache()
        self.leases = LeaseKeeper(ctx)
        # The units of proof of this drive (each run once per state, whichever gates include it).
        self.units = proofs.unit_book(ctx)
        # Stale milestones waiting for their re-proof, those re-proven in this
        # drive (each at most once: a gate that rewrites its own inputs would
        # loop), and why a failed milestone is held until its inputs change.
        self.to_reprove: set[str] = set()
        self.reproven: set[str] = set()
        self.stale: dict[str, StaleInfo] = {}
        self.waiting: dict[str, str] = {}
        # Milestones this drive will not start, and why: another driver's gate
        # holds their lease (sent back by hand while it ran).
        self.busy: dict[str, str] = {}
        self._ahead: Ahead | None = None  # the units run ahead while units_ahead's block runs
        self._ahead_run: contextlib.ExitStack | None = None  # they run (start_units_ahead), until stopped

    @property
    def graph(self) -> WorkGraph:
        """The item's graph as this drive knows it (read on first use, or
        when another writer changed the item since; a lost connection retried)."""
        return retrying(self.ctx.store, self._read_graph)

    def _read_graph(self) -> WorkGraph:
        with self.ctx.store.read() as conn:
            return items.graph_of(conn, items.head(conn, self.item), self.cache).graph

    def _in_scope(self, name: str) -> bool:
        return self.scope is None or name in self.scope

    # -- proofs ----------------------------------------------------------------

    def work_in(self, root: Path) -> None:
        """From now on this drive's gates run, and its inputs are read, in
        ``root``, another checkout of the workspace's repository (the
        integration checkout of doers when the workspace has uncommitted
        changes: flows/doer_attempts.py)."""
        self.ctx = dataclasses.replace(self.ctx, store=self.ctx.store.at(root))
        if self._ahead is not None:
            self._ahead.ctx = self.ctx  # (units run ahead there from now on, as its gates would: service/ahead.py)

    def proofs_check(self, g: WorkGraph) -> proofs.Check:
        """The proofs of every milestone of ``g`` as this drive sees them (in its root: see work_in)."""
        return proofs.check(self.ctx, self.item, g)

    def check_proofs(self) -> proofs.Check:
        """Look at the inputs: stale milestones join the re-proof queue
        (unless re-proven in this drive already), failed ones whose inputs did
        not change since are held (unless flaky or with a fix hook)."""
        g = self.graph
        if not any(m.has_inputs for m in g):
            return proofs.Check()
        chk = proofs.check(self.ctx, self.item, g)
        self.stale = {n: info for n, info in chk.stale.items() if self._in_scope(n)}
        self.to_reprove = {n for n in self.stale if n not in self.reproven}
        for name, why in chk.waiting.items():
            self.wait_for_change(name, why)
        return chk

    def wait_for_change(self, name: str, why: str) -> None:
        self.waiting[name] = why
        self.hold(name)

    def unchanged_since(self, m: Milestone, result: GateResult) -> bool:
        """Whether ``m``'s inputs are still what its failed attempt ran on."""
        if not m.has_inputs or result.fingerprint is None:
            return False
        snap = Snapshot(self.ctx.store.root)
        try:
            return proofs.fingerprint(snap, m).digest == result.fingerprint
        finally:
            snap.save()

    def cached_result(self, claim: Claim) -> tuple[GateResult, Fingerprint] | None:
        if not self.use_cache:
            return None
        return claims.cached_result(self.ctx, claim)

    def _blocked_by_reproof(self, g: WorkGraph, name: str) -> bool:
        """Whether a milestone must wait for a re-proof of something below it
        (queued, or running in this drive): if that fails, it would be built
        on a reopened milestone."""
        if not self.to_reprove and not self.reproven:
            return False
        for a in g.ancestors(name):
            if a in self.to_reprove or (a in self.reproven and g.get(a).status is S.IN_PROGRESS):
                return True
        return False

    def _reproof_pick(self, g: WorkGraph) -> Milestone | None:
        for name in sorted(self.to_reprove, key=lambda n: g.get(n).id if n in g else 0):
            if name not in g or g.get(name).status is not S.DONE:
                self.to_reprove.discard(name)  # it moved meanwhile (reopened behind a failed dep, reset...)
                continue
            if g.undone_deps(name) or self._blocked_by_reproof(g, name):
                continue
            return g.get(name)
        return None

    def _ready_pick(self, g: WorkGraph) -> Milestone | None:
        if not self.to_reprove and not any(g.get(n).status is S.IN_PROGRESS for n in self.reproven if n in g):
            return g.next_ready()
        return next((m for m in g.ready() if not self._blocked_by_reproof(g, m.name)), None)

    # -- claims -----------------------------------------------------------------

    def claim_next(self, expect_revision: int | None = None) -> Claim | None:
        """The next gate to run, leased to this drive in one transaction: the
        lowest-id stale milestone that can be re-proven (done -> in_progress),
        else the lowest-id ready milestone (-> in_progress).
        ``expect_revision`` guards a drive's first claim (``drive --expect-revision``)."""
        return write(self.ctx, self.item, self._claim, expect_revision, cache=self.cache)

    def record_and_claim_next(self, claim: Claim, result: GateResult) -> tuple[DoneResult, Claim | None]:
        """:meth:`record` a passed attempt and :meth:`claim_next` in one
        transaction: the drive's next gate when one is ready, with one write
        where two were (a commit, and the interpreter handed to the drive's
        other threads at each statement, cost as much as the writes)."""
        record = claims.record_step(self.ctx, claim, result)

        def fn(tx: Tx) -> tuple[DoneResult, Claim | None]:
            return record(tx), self._claim(tx)  # (a pick another driver holds is skipped, not refused: _claim)

        return write(self.ctx, self.item, fn, cache=self.cache)

    def _claim(self, tx: Tx) -> Claim | None:
        """claim_next's step, in ``tx``. A pick whose lease another driver
        holds is not this drive's to run: it is held (see :attr:`busy`),
        nothing of it written, and the next pick is tried."""
        tx.check_open()
        loaded = tx.graph()
        g = loaded.graph
        while True:
            m = self._reproof_pick(g)
            reproof = m is not None
            if m is None:
                m = self._ready_pick(g)
                if m is None:
                    return None
            action, reason = (Action.REPROVE, "stale: its inputs changed") if reproof else (Action.START, None)
            changes = g.apply(m.name, action, reason=reason)
            if reproof:
                self.to_reprove.discard(m.name)
            try:
                claim = take_lease(tx, loaded.pks[m.name], changes[0].after, self.owner, reproof=reproof, start=changes)
            except (TransitionError, ExpiredLease) as e:
                g.put(changes[0].before)  # the refused claim wrote nothing
                if reproof:
                    g.mark_stale([m.name])
                why = str(e) if isinstance(e, TransitionError) else "another driver's expired lease is on it"
                self.busy[m.name] = why
                self.hold(m.name)
                g.hold(m.name)  # (the graph at hand too: read in this transaction, it is not cached yet)
                continue
            if reproof:
                self.reproven.add(m.name)
            crash_point("claim")
            return claim

    def record(
        self,
        claim: Claim,
        result: GateResult,
        *,
        release: bool = False,
        manifest: dict[str, str] | None = None,
        final: bool = False,
    ) -> DoneResult:
        return claims.record(self.ctx, claim, result, release=release, cache=self.cache, manifest=manifest, final=final)

    def record_fix(self, claim: Claim, result: GateResult) -> None:
        claims.record_fix(self.ctx, claim, result)

    def reclaim_expired(self) -> list[DoneResult]:
        """Expired leases of this item (drivers that died): fenced and recorded."""
        return takeover.reclaim_expired(self.ctx, self.item, self.owner, cache=self.cache)

    def others(self) -> HeldElsewhere:
        """What other live drivers hold of this drive's milestones (its
        scope), and the item's revision: what a drive with nothing it can
        run waits on (see :func:`~milepost.service.takeover.held_by_others`)."""
        return retrying(self.ctx.store, lambda: held_by_others(self.ctx, self.item, self.owner, self.scope))

    def free_busy(self, held: Iterable[str]) -> list[str]:
        """Milestones held as :attr:`busy` whose lease is no longer held
        elsewhere (not in ``held``): claimable again. Returns their names."""
        freed = [name for name in self.busy if name not in set(held)]
        for name in freed:
            del self.busy[name]
            self.unhold(name)
        return freed

    def gate_env(self, claim: Claim) -> dict[str, str]:
        return claims.gate_env(self.ctx, claim)

    @contextlib.contextmanager
    def units_ahead(self, on: bool = True) -> Iterator[None]:
        """While the block runs, idle workers run the units of milestones yet to
        run, ahead of their gates (see :mod:`milepost.gates.units`); ``on``:
        whether to (a Dask worker's gate has no share in this process's book).
        Units started already (:meth:`start_units_ahead`, a drive's early
        start) run on: the block adopts them. They stop when it ends."""
        if self._ahead_run is None:
            self.start_units_ahead(on)
        try:
            yield
        finally:
            self.stop_units_ahead()

    def start_units_ahead(self, on: bool = True) -> None:
        """Start running units ahead now, until :meth:`stop_units_ahead` (or
        the end of a :meth:`units_ahead` block). A drive starts them before it
        imports Prefect (flows/early.py), so they run while it loads. Once: a
        second call while they run does nothing."""
        if self._ahead_run is not None:
            return
        stack = contextlib.ExitStack()
        stack.enter_context(self._units_ahead(on))
        self._ahead_run = stack

    def stop_units_ahead(self) -> None:
        """Stop the units run ahead (those running are stopped and dropped) and
        let go of the locks of passes no gate took. Once; later calls do nothing."""
        stack, self._ahead_run = self._ahead_run, None
        if stack is not None:
            stack.close()
            self.units.close()  # (passes run ahead that no gate took: their locks let go)

    @contextlib.contextmanager
    def _units_ahead(self, on: bool) -> Iterator[None]:
        if not on:
            yield
            return
        from milepost.service.ahead import running_ahead

        with running_ahead(
            self.ctx,
            self.item,
            self.units,
            self.graph,
            self.owner,
            scope=self.scope,
            reprove=self.to_reprove,  # (check_proofs ran: the loop's prepare)
            workspace=self.workspace,
        ) as ahead:
            self._ahead = ahead
            try:
                yield
            finally:
                self._ahead = None

    # -- holds ---------------------------------------------------------------

    def hold(self, name: str) -> None:
        """Keep ``name`` out of :meth:`claim_next` (this drive only)."""
        self.cache.hold(self.item, name)

    def unhold(self, name: str) -> None:
        if name in self.waiting:
            return  # only a change of its inputs (a later drive) lets it run again
        self.cache.unhold(self.item, name)

    def set_holds(self, names: set[str]) -> None:
        for name in list(self.cache.holds.get(self.item, set())):
            self.cache.unhold(self.item, name)
        for name in names:
            self.hold(name)


# -- the verdict ---------------------------------------------------------------


def nothing_to_run(svc: Service, item: int, until: str | None = None) -> DriveSummary | None:
    """A drive's summary when it has nothing to run (every milestone of its
    scope done, none stale: then none is ready and no other driver holds
    one), read from the store without Prefect; else None (a flow run it is)."""
    it, g = svc.graph(item, proofs=False)
    scope = {until, *g.ancestors(until)} if until is not None else None
    names = scope if scope is not None else {m.name for m in g}
    if any(g.get(n).status is not S.DONE for n in names):
        return None
    check = svc.check_proofs(it.id, g)  # marks the stale ones
    if any(n in names for n in check.stale):
        return None
    return summarize(svc, it, g, scope=scope, until=until, check=check)


def interrupted_summary(svc: Service, item: int, until: str | None = None) -> DriveSummary:
    """The summary of a drive interrupted before its flow run summed up (a
    Ctrl-C while Prefect loaded, its first gates running), read from the store:
    what it did and what is left."""
    it, g = svc.graph(item, proofs=False)
    scope = {until, *g.ancestors(until)} if until is not None and until in g else None
    return summarize(svc, it, g, scope=scope, until=until, interrupted=True)


def summarize(
    svc: Service,
    it: WorkItem,
    g: WorkGraph,
    *,
    scope: set[str] | None = None,
    until: str | None = None,
    durations: dict[str, float] | None = None,
    flow_run_id: str | None = None,
    interrupted: bool = False,
    held: dict[str, str] | None = None,
    cached: dict[str, CachedFrom | None] | None = None,
    check: proofs.Check | None = None,
) -> DriveSummary:
    """The drive's verdict: ok when every milestone of its scope (all, or
    ``--until``'s target and its deps) is done and none is stale; else one
    message naming, by view, what is not done and why."""
    check = check if check is not None else svc.check_proofs(it.id, g)  # marks the stale ones
    held = {**(held or {}), **check.waiting}
    # (a milestone of the scope may have been removed by a plan revision during the drive)
    in_scope = {n for n in scope if n in g} if scope is not None else {m.name for m in g}
    spent = svc.gate_time(it.id)
    durations, cached = durations or {}, cached or {}
    ms = []
    for m in g:
        ms.append(
            MilestoneSummary(
                id=m.id,
                name=m.name,
                status=m.status,
                view=display_status(g, m),
                attempts=m.attempts,
                max_attempts=m.max_attempts,
                duration=durations.get(m.name, 0.0),
                total_duration=spent[m.name][0] if m.name in spent else 0.0,
                last_attempt=spent[m.name][1] if m.name in spent else None,
                last_reason=m.reason,
                stale=check.stale.get(m.name),
                waiting_for_change=held.get(m.name),
                cached_from=cached.get(m.name),
                failure=_failure(svc, it.id, m) if m.name in in_scope else None,
            )
        )
    left = [s for s in ms if s.name in in_scope and s.view is not DisplayStatus.DONE]
    ok = not left
    if ok:
        n = len(in_scope)
        message = f"all {count(n, 'milestone')} are done" if n != 1 else "the milestone is done"
        if until is not None:
            below = f"the {count(n - 1, 'milestone')}" if n > 2 else "the milestone"
            message = f"{until} and {below} it depends on are done" if n > 1 else f"{until} is done"
    else:
        message = _not_done(g, left)
    if interrupted:
        message = "interrupted; " + message
    return DriveSummary(
        item=it.id,
        objective=it.objective,
        ok=ok and not interrupted,
        message=message,
        flow_run_id=flow_run_id,
        interrupted=interrupted,
        milestones=ms,
        until=until,
        scope=sorted(in_scope, key=lambda n: g.get(n).id) if scope is not None else None,
    )


def _failure(svc: Service, item: int, m: Milestone) -> Failure | None:
    """What a failed or stuck milestone's last attempt said (None: it is neither, or it never ran a gate)."""
    if m.status not in (MilestoneStatus.NEEDS_FIX, MilestoneStatus.STUCK):
        return None
    try:
        run = svc.run(m.name, None, item)
    except NotFoundError:
        return None
    return Failure(attempt=run.attempt, reason=run.reason, last_lines=last_lines(run.tail or ""), log=run.log_path)


def _not_done(g: WorkGraph, left: list[MilestoneSummary]) -> str:
    """What keeps a drive from ok, grouped by view, each name once:
    ``stuck: merge (blocks test, commit); stale: lint (changed since proven: a.py); blocked: test, commit``."""
    by: dict[str, list[str]] = {}
    told: set[str] = set()  # blocked milestones already named by what blocks them
    for s in left:
        if s.view is DisplayStatus.BLOCKED and s.name in told:
            continue
        group = s.view.value.replace("_", " ")
        if s.view is DisplayStatus.STUCK:
            below = g.descendants(s.name)
            told.update(below)
            text = f"{s.name} (blocks {', '.join(below)})" if below else s.name
        elif s.view is DisplayStatus.STALE and s.stale is not None:
            text = f"{s.name} ({s.stale.reason})"
        elif s.waiting_for_change:
            group = UNCHANGED
            text = f"{s.name} (attempt {s.last_attempt})" if s.last_attempt else s.name
        elif s.view is DisplayStatus.IN_REVIEW:
            group = "waiting for review"
            text = s.name
        else:
            text = s.name
        by.setdefault(group, []).append(text)
    order = ["stuck", "needs fix", UNCHANGED, "stale", "waiting for review"]
    groups = [k for k in order if k in by] + [k for k in by if k not in order]
    return "; ".join(f"{k}: {', '.join(by[k])}" for k in groups)


# Failed milestones the drive does not retry: their inputs did not change since they failed.
UNCHANGED = (
    "failed, inputs unchanged since (not retried until they change; fixed something outside them?"
    " `milepost reset NAME --reason TEXT`)"
)

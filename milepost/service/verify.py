"""``verify``: prove again, here and without Prefect, what was proven.

Its scope is the milestones that were proven once (a gate run of theirs
passed, or a cached one stood in), or the ones named. Lowest id first:

* done and stale (its inputs changed since its proof), or any done one with
  ``--all``: its gate runs again, a re-proof under a lease like ``done``'s
  (a pass spends no budget; a failure is the seed's second verification:
  needs_fix, and the done milestones built on it wait behind it, pending);
* needs_fix whose inputs changed since it failed, or pending because a dep
  was reopened, once its deps are done: its gate runs (an ordinary attempt);
* needs_fix on unchanged inputs, stuck, blocked, in progress elsewhere: not
  run, and said so.

A gate whose spec and fingerprint equal a run that passed anywhere in the
store is not run: the attempt is recorded ``cached``, naming that run, as the
drive records it (``fresh``, and ``all_``, run every gate they check). Up to
``max_parallel`` gates run at once, on threads of this process (subprocess
gates, no Prefect), taken lowest id first; a milestone is looked at only once
everything it depends on, directly or not, is settled in this verify (a
re-proof below it that fails reopens it). The claims and records are written
by the calling thread; the worker threads only run gates.

It is ok when, at its end, every milestone of its scope is done and none is
stale — so a CI step running it on a reused store goes green only on code
whose milestones are proven as it is (and, with nothing stale, it runs
nothing).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from contextlib import ExitStack, contextmanager, suppress
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from sqlalchemy import select

from milepost._text import last_lines
from milepost.errors import TransitionError
from milepost.gates.command import GateResult, run_gate
from milepost.gates.inputs import Fingerprint, Snapshot
from milepost.gates.outcome import CachedFrom, Outcome
from milepost.gates.units import UnitBook
from milepost.graph import steps
from milepost.graph.dag import WorkGraph
from milepost.graph.models import Milestone
from milepost.graph.status import Action, MilestoneStatus
from milepost.graph.words import count
from milepost.results import Claim, DoneResult, StaleInfo, Verified, VerifyResult
from milepost.retry import retried
from milepost.service import _rows as rows
from milepost.service import items, proofs
from milepost.service._rows import MILESTONES, RUNS
from milepost.service._tx import Context, Tx, write
from milepost.service.claims import cached_result, gate_env, interrupted_result, owner_here, record
from milepost.service.leases import LeaseKeeper, take_lease

__all__ = ["verify"]

S = MilestoneStatus


@retried
def proven_once(ctx: Context, item_id: int) -> set[str]:
    """Milestones of the item that a passed (or cached) gate run ever proved."""
    with ctx.store.read() as conn:
        return set(
            conn.execute(
                select(MILESTONES.c.name)
                .join(RUNS, RUNS.c.milestone_id == MILESTONES.c.id)
                .where(
                    MILESTONES.c.item_id == item_id,
                    RUNS.c.outcome.in_([Outcome.PASSED.value, Outcome.CACHED.value]),
                )
                .distinct()
            ).scalars()
        )


def verify(
    ctx: Context,
    names: Sequence[str] = (),
    *,
    all_: bool = False,
    item: int | None = None,
    fresh: bool = False,
    max_parallel: int = 1,
) -> VerifyResult:
    """See the module's docstring."""
    if max_parallel < 1:
        raise ValueError(f"max_parallel must be at least 1, not {max_parallel}")
    item_id = items.resolve(ctx, item)
    _, g = items.read(ctx, item_id)
    proven = proven_once(ctx, item_id)
    for name in names:
        view = g.view(name)  # an unknown name is refused here, before anything runs
        if name not in proven:
            raise TransitionError(
                f"cannot verify {name!r}: it was never proven (status {view}); verify proves again what a gate"
                " proved once: prove it first (`start` and `done`, or `drive`)",
                milestone=name,
                status=view.value,
            )
    scope = [m for m in g if m.name in proven and m.has_gate and (not names or m.name in names)]
    snap = Snapshot(ctx.store.root)  # one listing and one hash a file, for the check and the cache lookups
    check = proofs.check(ctx, item_id, g, [m.name for m in scope], snap=snap)
    run = _Run(ctx, item_id, g, check, all_=all_, use_cache=not (fresh or all_), max_parallel=max_parallel)
    run.snap = snap
    try:
        run.go([m.name for m in scope])
    finally:
        run.drop_snapshot()
    order = {m.name: i for i, m in enumerate(scope)}
    out = sorted(run.out.values(), key=lambda v: order[v.milestone])
    _, g = items.read(ctx, item_id)
    after = proofs.check(ctx, item_id, g, [m.name for m in scope])
    left = [m.name for m in scope if g.get(m.name).status is not S.DONE or m.name in after.stale]
    return VerifyResult(
        item=item_id,
        ok=not left,
        verified=out,
        unchanged=[n for n in order if n in run.unchanged],
        unchecked=[n for n in order if n in run.unchecked],
        message=_message(out, run.unchanged, left, after),
    )


@dataclass
class _Job:
    claim: Claim
    stale: StaleInfo | None


@dataclass
class _Run:
    """One verify: what is settled, what runs, and the gate threads."""

    ctx: Context
    item: int
    graph: WorkGraph
    check: proofs.Check
    all_: bool
    use_cache: bool
    max_parallel: int
    owner: str = field(default_factory=owner_here)
    out: dict[str, Verified] = field(default_factory=dict)
    unchanged: set[str] = field(default_factory=set)
    unchecked: set[str] = field(default_factory=set)
    running: dict[Future[GateResult], _Job] = field(default_factory=dict)
    stop: threading.Event = field(default_factory=threading.Event)
    # The files as listed and hashed since the last gate started (None: none kept): a gate may change them.
    snap: Snapshot | None = None
    units: UnitBook | None = None  # the units of proof of this verify (each run once per state)

    def __post_init__(self) -> None:
        self.units = proofs.unit_book(self.ctx, self.max_parallel)

    def go(self, order: list[str]) -> None:
        """Settle every milestone of ``order`` (id order): lowest id first,
        each once its ancestors in ``order`` are settled, up to
        ``max_parallel`` gates at once."""
        waiting = list(order)
        below = {n: set(self.graph.ancestors(n)) & set(order) for n in order}
        keeper = LeaseKeeper(self.ctx)
        ahead = ExitStack()  # the units run ahead: stopped before the gates are waited for, and the book closed
        with keeper, ahead, ThreadPoolExecutor(self.max_parallel, thread_name_prefix="milepost-verify") as pool:
            ahead.enter_context(self._ahead(order))
            try:
                while waiting or self.running:
                    unsettled = set(waiting) | {j.claim.milestone.name for j in self.running.values()}
                    for name in list(waiting):
                        if len(self.running) >= self.max_parallel:
                            break
                        if below[name] & unsettled:
                            continue  # a re-proof below it may still reopen it
                        waiting.remove(name)
                        unsettled.discard(name)
                        self._settle(name, keeper, pool)
                        if name in self.out or name in self.unchanged or name in self.unchecked:
                            continue
                        unsettled.add(name)  # its gate runs
                    if self.running:
                        ended, _ = wait(self.running, return_when=FIRST_COMPLETED)
                        for f in ended:
                            self._finish(f, keeper)
            except BaseException:
                # Ctrl-C (or a failure here): the running gates stop their process groups (the units run
                # ahead too: a gate may wait for one) and end interrupted; their attempts are recorded, then
                # it is raised again.
                self.stop.set()
                ahead.close()
                wait(self.running)
                for f in list(self.running):
                    # (a record that fails here, the database lost, leaves its lease: the next drive or
                    # verify reclaims it and recovers the attempt from its files; the first error is raised)
                    with suppress(Exception):
                        self._finish(f, keeper)
                raise
            finally:
                ahead.close()
                if self.units is not None:
                    self.units.close()  # (a record's lock a failed run never let go)

    @contextmanager
    def _ahead(self, order: list[str]) -> Iterator[None]:
        """With two workers or more, the stale milestones' units run ahead, before the first gate starts, as a
        re-proving drive's do (:func:`milepost.service.ahead.running_ahead`): their changed units together,
        split over the workers, not one pytest session per gate and another round for a later gate's. Only
        theirs: a milestone verify may not run (a failed one on unchanged inputs) runs nothing ahead."""
        reprove = {n for n in order if n in self.check.stale and self.graph.get(n).status is S.DONE}
        if self.units is None or self.units.workers < 2 or not self.use_cache or not reprove:
            yield
            return
        from milepost.service.ahead import AHEAD_START_WAIT, running_ahead

        with running_ahead(self.ctx, self.item, self.units, self.graph, self.owner, scope=reprove, reprove=reprove):
            self.units.wait_started(AHEAD_START_WAIT)
            yield

    def _settle(self, name: str, keeper: LeaseKeeper, pool: ThreadPoolExecutor) -> None:
        """Decide one milestone: unchanged, not runnable (said why), cached, or its gate submitted."""
        now = _current(self.ctx, self.item, name)
        stale = self.check.stale.get(name)
        if now.status is S.DONE:
            if stale is None and not self.all_:
                (self.unchanged if now.has_inputs else self.unchecked).add(name)
                return
            self._start(name, keeper, pool, reproof=True, stale=stale)
            return
        why = _cannot_run(self.ctx, self.item, now, self.check.waiting.get(name))
        if why is not None:
            self.out[name] = Verified(milestone=name, status=now.status, reason=why)
            return
        self._start(name, keeper, pool, reproof=False, stale=None)

    def _start(
        self, name: str, keeper: LeaseKeeper, pool: ThreadPoolExecutor, *, reproof: bool, stale: StaleInfo | None
    ) -> None:
        claim = _claim(self.ctx, self.item, name, self.owner, reproof=reproof)
        if isinstance(claim, Verified):
            self.out[name] = claim
            return
        try:
            hit = cached_result(self.ctx, claim, self._fingerprint(claim.milestone)) if self.use_cache else None
            if hit is not None:
                # A passed run on the same gate and inputs stands in, recorded as the drive records it.
                done = record(self.ctx, claim, hit[0], manifest=hit[1].files)
                self.out[name] = _verified(claim, done, stale)
                return
            keeper.add(claim)
            self.drop_snapshot()
            self.running[pool.submit(self._gate, claim)] = _Job(claim, stale)
        except BaseException as e:
            # Never leave a claimed milestone behind a lease nobody renews.
            keeper.remove(claim)
            why = f"could not start its gate: {type(e).__name__}: {e}"
            record(self.ctx, claim, interrupted_result(claim, datetime.now(UTC), reason=why), release=True)
            raise

    def _fingerprint(self, m: Milestone) -> Fingerprint | None:
        """``m``'s fingerprint now, from the snapshot kept while no gate has
        started since it was taken (None: ``m`` is never cached)."""
        if not (m.has_inputs and m.cache):
            return None
        if self.snap is None:
            self.snap = Snapshot(self.ctx.store.root)
        fp = proofs.fingerprint(self.snap, m)
        if self.running:
            self.drop_snapshot()  # a gate runs now: what it writes is seen by the next lookup
        return fp

    def drop_snapshot(self) -> None:
        if self.snap is not None:
            self.snap.save()  # (the stat cache)
            self.snap = None

    def _gate(self, claim: Claim) -> GateResult:
        """On a worker thread: run the leased gate (a subprocess per command)."""
        m = claim.milestone
        root = self.ctx.store.root
        origin = CachedFrom(item=claim.item, milestone=m.name, attempt=claim.attempt)
        return run_gate(
            m.gate,
            Path(claim.log_path),
            default_cwd=root,
            env=gate_env(self.ctx, claim),
            default_timeout=m.timeout,
            stop=self.stop,
            inputs=m.inputs if m.has_inputs else (),
            root=root,
            units=self.units,
            reuse_units=self.use_cache and m.cache,  # (cache: false, --fresh: every unit runs)
            origin=origin,
        )

    def _finish(self, f: Future[GateResult], keeper: LeaseKeeper) -> None:
        job = self.running.pop(f)
        keeper.remove(job.claim)
        try:
            result = f.result()
        except Exception as e:  # the runner itself failed (not the gate): no verdict, no budget spent
            why = f"could not run its gate: {type(e).__name__}: {e}"
            result = interrupted_result(job.claim, datetime.now(UTC), reason=why)
        # An interrupted attempt spends no budget: a re-proof stays done, an attempt is ready again.
        done = record(self.ctx, job.claim, result, release=True)
        self.out[job.claim.milestone.name] = _verified(job.claim, done, job.stale)


@retried
def _current(ctx: Context, item_id: int, name: str) -> Milestone:
    with ctx.store.read() as conn:
        return rows.with_deps(rows.ONE_MILESTONE.rows(conn, item=item_id, name=name))[0]


def _cannot_run(ctx: Context, item_id: int, m: Milestone, waiting: str | None) -> str | None:
    """Why a proven-once milestone that is not done cannot run now (None: it can)."""
    if m.status is S.STUCK or m.is_stuck:
        return f"stuck: {m.reason or 'retry budget spent'}; an operator can `milepost reset {m.name} --reason TEXT`"
    if m.status is S.IN_PROGRESS:
        return "in progress: another agent or driver has it"
    if m.status not in (S.PENDING, S.NEEDS_FIX):
        return f"{m.status.value}: not scheduled"
    deps = {d: _current(ctx, item_id, d).status for d in m.deps}
    undone = [f"{d} ({st.value})" for d, st in deps.items() if st is not S.DONE]
    if undone:
        return f"waits behind {', '.join(undone)}"
    if m.status is S.NEEDS_FIX and waiting is not None:
        return waiting
    return None


def _claim(ctx: Context, item_id: int, name: str, owner: str, *, reproof: bool) -> Claim | Verified:
    """Claim under a lease (done -> in_progress for a re-proof; pending/needs_fix
    -> in_progress otherwise), or say why it was not run."""

    def fn(tx: Tx) -> Claim:
        tx.check_open()
        pk, m = tx.find(name)
        action = Action.REPROVE if reproof else Action.START
        change = steps.act(m, action, undone_deps=tx.undone_deps(pk, m), reason="verify" if reproof else None)
        tx.save(pk, [change])
        return take_lease(tx, pk, change.after, owner, reproof=reproof)

    try:
        return write(ctx, item_id, fn)
    except TransitionError as e:  # it changed since it was read (another writer)
        return Verified(milestone=name, status=_current(ctx, item_id, name).status, reason=f"not run: {e.message}")


def _verified(claim: Claim, r: DoneResult, stale: StaleInfo | None) -> Verified:
    run = r.gate_run
    failed = run is not None and not run.outcome.proves
    return Verified(
        milestone=claim.milestone.name,
        outcome=run.outcome if run else None,
        status=r.milestone.status,
        attempt=claim.attempt,
        duration=run.duration if run else 0.0,
        reason=(run.reason if run else "") + (f"; {r.note}" if r.note else ""),
        stale=stale,
        reopened=[c.milestone for c in r.changes[1:]],
        cached_from=run.cached_from if run else None,
        log=run.log_path if run and failed else None,
        last_lines=last_lines(run.tail or "") if run and failed else [],
    )


def _message(out: list[Verified], unchanged: set[str], left: list[str], after: proofs.Check) -> str:
    if not out:
        n = len(unchanged)
        return f"nothing to re-prove: {count(n, 'proven milestone')} unchanged since proven"
    passed = [v.milestone for v in out if v.outcome is Outcome.PASSED]
    cached = [v.milestone for v in out if v.outcome is Outcome.CACHED]
    failed = [v.milestone for v in out if v.outcome is not None and not v.outcome.proves]
    parts = []
    if passed:
        parts.append(f"proven again: {', '.join(passed)}")
    if cached:
        parts.append(f"cached (the same gate passed on the same inputs before): {', '.join(cached)}")
    if failed:
        parts.append(f"failed: {', '.join(failed)}")
    not_run = [v.milestone for v in out if v.outcome is None]
    if not_run:
        parts.append(f"not run: {', '.join(not_run)}")
    still = [n for n in left if n in after.stale]
    if still:
        parts.append(f"still stale: {', '.join(f'{n} ({after.stale[n].reason})' for n in still)}")
    return "; ".join(parts)

"""``verify``: prove again, here and without Prefect, what was proven.

Its scope is the milestones that were proven once (a gate run of theirs
passed, or a cached one stood in), or the ones named. In id order:

* done and stale (its inputs changed since its proof), or any done one with
  ``--all``: its gate runs again, a re-proof under a lease like ``done``'s
  (a pass spends no budget; a failure is the seed's second verification:
  needs_fix, and the done milestones built on it wait behind it, pending);
* needs_fix whose inputs changed since it failed, or pending because a dep
  was reopened, once its deps are done: its gate runs (an ordinary attempt);
* needs_fix on unchanged inputs, stuck, blocked, in progress elsewhere: not
  run, and said so.

It never takes a result from the cache: the gates run. It is ok when, at
its end, every milestone of its scope is done and none is stale — so a CI
step running it on a reused store goes green only on code whose milestones
are proven as it is (and, with nothing stale, it runs nothing).
"""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import select

from milepost.errors import TransitionError
from milepost.gates.outcome import Outcome
from milepost.graph import steps
from milepost.graph.dag import WorkGraph
from milepost.graph.models import Milestone
from milepost.graph.status import Action, MilestoneStatus
from milepost.results import Claim, Verified, VerifyResult
from milepost.service import _rows as rows
from milepost.service import items, proofs
from milepost.service._rows import MILESTONES, RUNS
from milepost.service._tx import Context, Tx, write
from milepost.service.claims import owner_here, run_claimed, take_lease

__all__ = ["verify"]

S = MilestoneStatus


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


def verify(ctx: Context, names: Sequence[str] = (), *, all_: bool = False, item: int | None = None) -> VerifyResult:
    """See the module's docstring."""
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
    check = proofs.check(ctx, item_id, g, [m.name for m in scope])
    owner = owner_here()
    out: list[Verified] = []
    unchanged: list[str] = []
    unchecked: list[str] = []
    for m in scope:
        now = _current(ctx, item_id, m.name)
        stale = check.stale.get(m.name)
        if now.status is S.DONE:
            if stale is None and not all_:
                (unchanged if m.has_inputs else unchecked).append(m.name)
                continue
            out.append(_run(ctx, item_id, m.name, owner, reproof=True).model_copy(update={"stale": stale}))
            continue
        why = _cannot_run(g, ctx, item_id, now, check.waiting.get(m.name))
        if why is not None:
            out.append(Verified(milestone=m.name, status=now.status, reason=why))
            continue
        out.append(_run(ctx, item_id, m.name, owner, reproof=False))
    _, g = items.read(ctx, item_id)
    after = proofs.check(ctx, item_id, g, [m.name for m in scope])
    left = [m.name for m in scope if g.get(m.name).status is not S.DONE or m.name in after.stale]
    ok = not left
    return VerifyResult(
        item=item_id,
        ok=ok,
        verified=out,
        unchanged=unchanged,
        unchecked=unchecked,
        message=_message(out, unchanged, left, after),
    )


def _current(ctx: Context, item_id: int, name: str) -> Milestone:
    with ctx.store.read() as conn:
        return rows.with_deps(rows.ONE_MILESTONE.rows(conn, item=item_id, name=name))[0]


def _cannot_run(g: WorkGraph, ctx: Context, item_id: int, m: Milestone, waiting: str | None) -> str | None:
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


def _run(ctx: Context, item_id: int, name: str, owner: str, *, reproof: bool) -> Verified:
    """Claim (done -> in_progress for a re-proof; pending/needs_fix -> in_progress
    otherwise), run the gate here, record it."""

    def fn(tx: Tx) -> Claim | Verified:
        tx.check_open()
        pk, m = tx.find(name)
        action = Action.REPROVE if reproof else Action.START
        change = steps.act(m, action, undone_deps=tx.undone_deps(pk, m), reason="verify" if reproof else None)
        tx.save(pk, [change])
        return take_lease(tx, pk, change.after, owner, reproof=reproof)

    try:
        claim = write(ctx, item_id, fn)
    except TransitionError as e:  # it changed since it was read (another writer)
        return Verified(milestone=name, status=_current(ctx, item_id, name).status, reason=f"not run: {e.message}")
    assert isinstance(claim, Claim)
    r = run_claimed(ctx, claim)
    run = r.gate_run
    return Verified(
        milestone=name,
        outcome=run.outcome if run else None,
        status=r.milestone.status,
        attempt=claim.attempt,
        duration=run.duration if run else 0.0,
        reason=(run.reason if run else "") + (f"; {r.note}" if r.note else ""),
        reopened=[c.milestone for c in r.changes[1:]],
    )


def _message(out: list[Verified], unchanged: list[str], left: list[str], after: proofs.Check) -> str:
    ran = [v for v in out if v.outcome is not None]
    passed = [v.milestone for v in ran if v.outcome is not None and v.outcome.proves]
    failed = [v.milestone for v in ran if v.milestone not in passed]
    if not out:
        n = len(unchanged)
        return f"nothing to re-prove: {n} proven milestone{'s' if n != 1 else ''} unchanged since proven"
    parts = []
    if passed:
        parts.append(f"proven again: {', '.join(passed)}")
    if failed:
        parts.append(f"failed: {', '.join(failed)}")
    not_run = [v.milestone for v in out if v.outcome is None]
    if not_run:
        parts.append(f"not run: {', '.join(not_run)}")
    still = [n for n in left if n in after.stale]
    if still:
        parts.append(f"still stale: {', '.join(f'{n} ({after.stale[n].reason})' for n in still)}")
    return "; ".join(parts)

"""``done`` with a gate: the gate runs here, in this process (no Prefect),
under a lease, and its outcome is recorded by the one path
(:func:`milepost.service.claims.record`). A lease a dead driver left is
taken over first (:mod:`.takeover`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

from sqlalchemy import select

from milepost.errors import ConcurrentUpdateError
from milepost.gates.command import run_gate
from milepost.gates.outcome import CachedFrom
from milepost.graph import steps
from milepost.graph.status import Action, MilestoneStatus, transition
from milepost.results import Claim, DoneResult
from milepost.service import _rows as rows
from milepost.service import proofs
from milepost.service._rows import MILESTONES
from milepost.service._tx import Context, Tx, write
from milepost.service.claims import cached_result, gate_env, interrupted_result, owner_here, record
from milepost.service.items import resolve
from milepost.service.leases import ExpiredLease, LeaseKeeper, expired, held_elsewhere, take_lease
from milepost.service.takeover import holder_gone, reclaim_for_done

__all__ = ["done", "run_claimed"]


def done(
    ctx: Context,
    name: str,
    *,
    verdict: str | None = None,
    item: int | None = None,
    expect_revision: int | None = None,
    use_cache: bool = True,
) -> DoneResult:
    """Finish an in-progress milestone: without a gate it is done; with one,
    the gate runs here (no Prefect), and its outcome decides: pass -> done,
    fail -> needs_fix, or stuck when the retry budget is spent. A milestone
    with a review gate waits for ``approve``/``reject`` after passing. With
    inputs (and its ``cache`` on, and ``use_cache``), a passed run anywhere
    in the store with the same fingerprint stands in for running the gate."""
    owner = owner_here()
    item_id = resolve(ctx, item)
    claimed = _claim(ctx, item_id, name, _claim_step(ctx, name, owner, verdict), owner, expect_revision)
    if isinstance(claimed, DoneResult):
        return claimed
    if use_cache:
        hit = cached_result(ctx, claimed)
        if hit is not None:
            return record(ctx, claimed, hit[0], verdict=verdict, manifest=hit[1].files)
    return run_claimed(ctx, claimed, verdict=verdict)


def _claim_step(ctx: Context, name: str, owner: str, verdict: str | None) -> Callable[[Tx], DoneResult | Claim]:
    """The write step of ``done``: a milestone without a gate (or awaiting review) done,
    else its lease taken; :class:`ExpiredLease` when a dead driver holds it."""

    def claim(tx: Tx) -> DoneResult | Claim:
        tx.check_open()
        pk, m = tx.find(name)
        if m.status is not MilestoneStatus.IN_PROGRESS:
            transition(name, m.status, Action.DONE)  # raises with the allowed actions
        _check_holder(ctx, tx, pk, owner)
        if not m.has_gate or m.awaiting_review:
            change = steps.act(m, Action.DONE, reason=verdict)
            out = tx.save(pk, [change])
            return DoneResult(item=tx.id, revision=tx.next_revision, milestone=change.after, passed=True, changes=out)
        return take_lease(tx, pk, m, owner)

    return claim


def _check_holder(ctx: Context, tx: Tx, pk: int, owner: str) -> None:
    """Raise :class:`ExpiredLease` when another driver's lease on the milestone
    expired, or its holder died on this machine (need not be waited for)."""
    lease = tx.rows[pk] if pk in tx.rows else tx.conn.execute(rows.LEASE, {"pk": pk}).one()
    if held_elsewhere(lease, owner):
        if expired(lease, ctx.clock()):
            raise ExpiredLease
        # A holder that died on this machine need not be waited for.
        if holder_gone(tx.conn.execute(select(MILESTONES.c.lease_info).where(MILESTONES.c.id == pk)).scalar()):
            raise ExpiredLease(gone=True)


def _claim(
    ctx: Context,
    item_id: int,
    name: str,
    claim: Callable[[Tx], DoneResult | Claim],
    owner: str,
    expect_revision: int | None,
) -> DoneResult | Claim:
    """Run the claim step in a write (three tries): a dead driver's lease is taken
    over first, and its attempt is the answer when it had ended on its own."""
    for _ in range(3):
        try:
            return write(ctx, item_id, claim, expect_revision)
        except ExpiredLease as e:
            # A driver died holding the lease: fence and record its attempt first.
            recovered = reclaim_for_done(ctx, item_id, name, owner, gone=e.gone)
            if recovered is not None and recovered.milestone.status is not MilestoneStatus.IN_PROGRESS:
                # The dead driver's attempt had ended on its own: that was the attempt.
                return recovered
    raise ConcurrentUpdateError(f"the lease of {name!r} kept changing hands; try again", milestone=name)


def run_claimed(ctx: Context, claimed: Claim, *, verdict: str | None = None) -> DoneResult:
    """Run a leased gate here (no Prefect), renewing its lease, and record it.
    Ctrl-C kills the gate's process group and records the attempt as
    interrupted (no budget spent) before re-raising."""
    started = datetime.now(UTC)
    m = claimed.milestone
    book = proofs.unit_book(ctx)
    try:
        with LeaseKeeper(ctx, [claimed]), contextlib.closing(book):
            result = run_gate(
                m.gate,
                Path(claimed.log_path),
                default_cwd=ctx.store.root,
                env=gate_env(ctx, claimed),
                default_timeout=m.timeout,
                inputs=m.inputs if m.has_inputs else (),
                root=ctx.store.root,
                units=book,
                reuse_units=m.cache,  # (cache: false: every unit runs; --no-cache leaves the units to their digests)
                origin=CachedFrom(item=claimed.item, milestone=m.name, attempt=claimed.attempt),
            )
    except KeyboardInterrupt:
        # The gate's process group is already killed: keep the evidence,
        # leave the budget unspent, and let the caller exit 130.
        record(ctx, claimed, interrupted_result(claimed, started))
        raise
    return record(ctx, claimed, result, verdict=verdict)

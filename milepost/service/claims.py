"""Claims, leases and gate runs: the one path by which a gate runs under a
lease, used by ``done`` (the gate runs here) and by the drive loop (the gate
runs as a Prefect task): :func:`take_lease` numbers the attempt and records
where it runs, a :class:`LeaseKeeper` renews the lease while the gate runs,
:func:`record` stores the run and applies its outcome, and
:func:`reclaim_expired` fences and records what a dead driver left behind.
"""

from __future__ import annotations

import os
import socket
import threading
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from sqlalchemy import insert, select, update

from milepost._text import holder as shown_holder
from milepost.errors import ConcurrentUpdateError
from milepost.gates._crash import crash_point
from milepost.gates.command import GateResult, Outcome, attempt_files, recover_result, run_gate
from milepost.gates.inputs import Fingerprint, read_manifest
from milepost.gates.liveness import holder_gone
from milepost.gates.outcome import CachedFrom
from milepost.gates.supervisor import host_identity, stop_attempt
from milepost.graph import steps
from milepost.graph.models import Milestone
from milepost.graph.status import Action, MilestoneStatus, transition
from milepost.results import Claim, DoneResult, GateRun
from milepost.retry import retrying
from milepost.service import _rows as rows
from milepost.service import proofs
from milepost.service._rows import MILESTONES, REFS, RUNS
from milepost.service._tx import Context, GraphCache, ItemEvent, Tx, write
from milepost.service.items import resolve
from milepost.service.leases import ExpiredLease, LeaseKeeper, expired, held_elsewhere, log_path, take_lease
from milepost.service.recovery import already_recorded, reclaimable

__all__ = ["LeaseKeeper", "cached_result", "done", "gate_env", "interrupted_result", "log_path", "reclaim_expired",
           "record", "record_fix", "record_step", "run_claimed", "take_lease"]  # fmt: skip

# How long a reclaimer waits for a dead driver's gate processes to die after SIGKILL.
STOP_WAIT_SECONDS = 10.0


def owner_here() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{threading.get_ident()}"


def interrupted_result(claim: Claim, started: datetime, reason: str = "interrupted") -> GateResult:
    return GateResult(
        outcome=Outcome.INTERRUPTED,
        reason=reason,
        started_at=started,
        finished_at=datetime.now(UTC),
        log_path=claim.log_path,
    )


def gate_env(ctx: Context, claim: Claim) -> dict[str, str]:
    """What a gate (and a fix hook) learns about its context."""
    return {
        "MILEPOST_ITEM": str(claim.item),
        "MILEPOST_MILESTONE": claim.milestone.name,
        "MILEPOST_ATTEMPT": str(claim.attempt),
        "MILEPOST_WORKSPACE": str(ctx.store.root),
    }


# -- done: the gate runs here ---------------------------------------------------------


def done(ctx: Context, name: str, *, verdict: str | None = None, item: int | None = None,
         expect_revision: int | None = None, use_cache: bool = True) -> DoneResult:  # fmt: skip
    """Finish an in-progress milestone: without a gate it is done; with one,
    the gate runs here (no Prefect), and its outcome decides: pass -> done,
    fail -> needs_fix, or stuck when the retry budget is spent. A milestone
    with a review gate waits for ``approve``/``reject`` after passing. With
    inputs (and its ``cache`` on, and ``use_cache``), a passed run anywhere
    in the store with the same fingerprint stands in for running the gate."""
    owner = owner_here()
    item_id = resolve(ctx, item)

    def claim(tx: Tx) -> DoneResult | Claim:
        tx.check_open()
        pk, m = tx.find(name)
        if m.status is not MilestoneStatus.IN_PROGRESS:
            transition(name, m.status, Action.DONE)  # raises with the allowed actions
        lease = tx.rows[pk] if pk in tx.rows else tx.conn.execute(rows.LEASE, {"pk": pk}).one()
        if held_elsewhere(lease, owner):
            if expired(lease, ctx.clock()):
                raise ExpiredLease
            # A holder that died on this machine need not be waited for.
            if holder_gone(tx.conn.execute(select(MILESTONES.c.lease_info).where(MILESTONES.c.id == pk)).scalar()):
                raise ExpiredLease(gone=True)
        if not m.has_gate or m.awaiting_review:
            change = steps.act(m, Action.DONE, reason=verdict)
            out = tx.save(pk, [change])
            return DoneResult(item=tx.id, revision=tx.next_revision, milestone=change.after, passed=True, changes=out)
        return take_lease(tx, pk, m, owner)

    for _ in range(3):
        try:
            claimed = write(ctx, item_id, claim, expect_revision)
            break
        except ExpiredLease as e:
            # A driver died holding the lease: fence and record its attempt first.
            recovered = _reclaim_for_done(ctx, item_id, name, owner, gone=e.gone)
            if recovered is not None and recovered.milestone.status is not MilestoneStatus.IN_PROGRESS:
                # The dead driver's attempt had ended on its own: that was the attempt.
                return recovered
    else:
        raise ConcurrentUpdateError(f"the lease of {name!r} kept changing hands; try again", milestone=name)
    if isinstance(claimed, DoneResult):
        return claimed
    if use_cache:
        hit = cached_result(ctx, claimed)
        if hit is not None:
            return record(ctx, claimed, hit[0], verdict=verdict, manifest=hit[1].files)
    return run_claimed(ctx, claimed, verdict=verdict)


def run_claimed(ctx: Context, claimed: Claim, *, verdict: str | None = None) -> DoneResult:
    """Run a leased gate here (no Prefect), renewing its lease, and record it.
    Ctrl-C kills the gate's process group and records the attempt as
    interrupted (no budget spent) before re-raising."""
    started = datetime.now(UTC)
    m = claimed.milestone
    try:
        with LeaseKeeper(ctx, [claimed]):
            result = run_gate(
                m.gate,
                Path(claimed.log_path),
                default_cwd=ctx.store.root,
                env=gate_env(ctx, claimed),
                default_timeout=m.timeout,
                inputs=m.inputs if m.has_inputs else (),
                root=ctx.store.root,
                units=proofs.unit_book(ctx),
                origin=CachedFrom(item=claimed.item, milestone=m.name, attempt=claimed.attempt),
            )
    except KeyboardInterrupt:
        # The gate's process group is already killed: keep the evidence,
        # leave the budget unspent, and let the caller exit 130.
        record(ctx, claimed, interrupted_result(claimed, started))
        raise
    return record(ctx, claimed, result, verdict=verdict)


def cached_result(ctx: Context, claim: Claim, fp: Fingerprint | None = None) -> tuple[GateResult, Fingerprint] | None:
    """A ``cached`` attempt for ``claim`` when a passed run anywhere in the
    store has the fingerprint its inputs have now; None when the milestone
    has no inputs, its cache is off, or no such run exists."""
    m = claim.milestone
    if not (m.has_inputs and m.cache):
        return None
    if fp is None:
        from milepost.gates.inputs import Snapshot

        snap = Snapshot(ctx.store.root)
        fp = proofs.fingerprint(snap, m)
        snap.save()
    if fp.digest is None:
        return None
    hit = proofs.cached_run(ctx, fp.digest)
    if hit is None:
        return None
    now = datetime.now(UTC)
    source = CachedFrom(item=hit.item, milestone=hit.milestone, attempt=hit.attempt)
    reason = f"cached: passed as item {hit.item} {hit.milestone!r} attempt {hit.attempt} on the same gate and inputs"
    result = GateResult(
        outcome=Outcome.CACHED, reason=reason, tail=reason, started_at=now, finished_at=now, host=socket.gethostname(),
        fingerprint=fp.digest, inputs_digest=fp.inputs_digest, inputs_files=len(fp.files), cached_from=source,
    )  # fmt: skip
    return result, fp


# -- recording ------------------------------------------------------------------------


def record(ctx: Context, c: Claim, result: GateResult, *, verdict: str | None = None, release: bool = False,
           cache: GraphCache | None = None, manifest: dict[str, str] | None = None) -> DoneResult:  # fmt: skip
    """:func:`record_step` in a write transaction of its own."""
    return write(ctx, c.item, record_step(ctx, c, result, verdict=verdict, release=release, manifest=manifest),
                 cache=cache)  # fmt: skip


def record_step(ctx: Context, c: Claim, result: GateResult, *, verdict: str | None = None, release: bool = False,
                manifest: dict[str, str] | None = None) -> Callable[[Tx], DoneResult]:  # fmt: skip
    """The step of a write transaction that stores a gate run (always: evidence is never dropped), frees
    the lease and applies the outcome while the milestone is still in progress: pass -> done (or in review),
    fail -> needs_fix (ready again after the retry delay) or stuck. An interrupted run spends no budget; with
    ``release`` the milestone becomes ready again (the drive loop), without it stays in progress (``done``
    interrupted by hand). A re-proof (``c.reproof``) that passes spends no budget; one that fails reopens the
    done milestones built on it (pending behind it); one interrupted leaves the milestone done. A passing
    run's fingerprint becomes the milestone's proof, and its file list (``manifest``, else the file beside
    its log) is kept for the reasons of a later stale view.

    Only the lease's holder records: when another driver took the lease over (this one was frozen or cut off
    from the database long enough for it to expire), that driver records this attempt; nothing is written here."""

    def fn(tx: Tx) -> DoneResult:
        m = tx.find_pk(c.pk, c.milestone.name)
        # The lease freed where this driver holds it (one statement: its row count says whether it did).
        if rows.DROP_LEASE.run(tx.conn, pk=c.pk, owner=c.owner) == 1:
            holder: str | None = c.owner
        else:
            holder = rows.LEASE_ROW.rows(tx.conn, pk=c.pk)[0].lease_owner
        if holder is None and already_recorded(tx.conn, c):
            # Recorded by whoever the lease passed to, or by this very write before its connection dropped.
            return DoneResult(item=tx.id, revision=tx.revision, milestone=m, passed=result.passed,
                              note=f"attempt {c.attempt} of {m.name!r} is in the store already;"
                                   " this outcome is not applied again")  # fmt: skip
        if holder != c.owner:
            return DoneResult(
                item=tx.id,
                revision=tx.revision,
                milestone=m,
                passed=result.passed,
                note=f"the lease of {m.name!r} passed to {shown_holder(holder or 'another driver')} while its gate ran"
                f" (attempt {c.attempt}); that driver records the attempt, this outcome is not applied",
            )
        tx.dirty = True
        if not c.milestone.has_gate:
            return _finish_without_gate(tx, c, m, result, verdict)
        stored = ctx.store.relative(Path(result.log_path)) if result.log_path else None
        run = GateRun(**result.model_dump(), item=tx.id, milestone=c.milestone.name, attempt=c.attempt, verdict=verdict)
        source = _source_run_id(tx, result)
        rows.ADD_RUN.run(tx.conn, **rows.run_row(tx.id, c.pk, c.attempt, result, stored, verdict, source))
        proofs.store_unit_passes(tx.conn, tx.id, c.milestone.name, c.attempt, result)
        if result.passed and result.inputs_digest:
            files = manifest
            if files is None and result.log_path:
                files = read_manifest(Path(result.log_path), result.inputs_digest)
            if files is not None:
                proofs.store_manifest(tx.conn, result.inputs_digest, files)
        # Every gate run is evidence of the work item.
        rows.ADD_REF.run(
            tx.conn,
            item_id=tx.id,
            kind="gate_run",
            ref=stored or "",
            reason=f"{c.milestone.name} attempt {c.attempt}: {result.outcome.value} ({result.reason})",
            at=result.finished_at,
        )
        base: dict[str, Any] = {"item": tx.id, "revision": tx.next_revision, "gate_run": run}
        if m.status is not MilestoneStatus.IN_PROGRESS or m.awaiting_review:
            tx.emit(ItemEvent.GATE_RUN, m.name, m.status.value, m.status.value, result.reason)
            return DoneResult(
                **base,
                milestone=m,
                passed=result.passed,
                note=f"{m.name!r} became {m.status.value} while its gate ran: the run is kept as evidence only",
            )
        if result.outcome is Outcome.INTERRUPTED:
            # (said once: the reason of an interrupted attempt mostly begins with the word already)
            why = result.reason if result.reason.startswith("interrupted") else f"interrupted: {result.reason}"
            if c.reproof:
                change = steps.act(m, Action.RESTORE, reason=f"re-proof {why}")
            elif not release:
                tx.emit(ItemEvent.INTERRUPTED, m.name, m.status.value, m.status.value, result.reason)
                return DoneResult(**base, milestone=m, passed=False)
            else:
                change = steps.act(m, Action.RELEASE, reason=why)
        elif c.reproof and not result.passed:
            # The second verification failed: what was built on it waits behind it.
            g = tx.graph().graph
            change = g.record_attempt(
                m.name, False, result.reason, at=result.finished_at, free=True, fingerprint=result.fingerprint
            )
            reopened = g.reopen_dependents(m.name, f"its re-proof failed: {result.reason}")
            out = tx.save(c.pk, [change, *reopened], applied=True)
            crash_point("record")
            return DoneResult(**base, milestone=change.after, passed=False, changes=out)
        else:
            change = steps.record_attempt(
                m,
                result.passed,
                None if result.passed else result.reason,
                at=result.finished_at,
                free=c.reproof or result.outcome is Outcome.CACHED,
                fingerprint=result.fingerprint,
            )
        out = tx.save(c.pk, [change])
        crash_point("record")
        return DoneResult(**base, milestone=change.after, passed=result.passed, changes=out)

    return fn


def _source_run_id(tx: Tx, result: GateResult) -> int | None:
    """The row of the passed run a ``cached`` attempt reuses."""
    src = result.cached_from
    if src is None:
        return None
    return tx.conn.execute(
        select(RUNS.c.id)
        .join(MILESTONES, MILESTONES.c.id == RUNS.c.milestone_id)
        .where(RUNS.c.item_id == src.item, MILESTONES.c.name == src.milestone, RUNS.c.attempt == src.attempt)
    ).scalar()


def _finish_without_gate(tx: Tx, c: Claim, m: Milestone, result: GateResult, verdict: str | None) -> DoneResult:
    """A milestone without a gate is done when the drive reaches it (or
    waits for review): no gate run is stored, no attempt is spent."""
    base: dict[str, Any] = {"item": tx.id, "revision": tx.next_revision}
    if m.status is not MilestoneStatus.IN_PROGRESS or m.awaiting_review:
        return DoneResult(**base, milestone=m, passed=False, note=f"{m.name!r} is {m.status.value}")
    action = Action.RELEASE if result.outcome is Outcome.INTERRUPTED else Action.DONE
    change = steps.act(m, action, reason=verdict)
    out = tx.save(c.pk, [change])
    return DoneResult(**base, milestone=change.after, passed=action is Action.DONE, changes=out)


def record_fix(ctx: Context, claim: Claim, result: GateResult) -> None:
    """Keep a fix hook's run as evidence of the work item (a work ref)."""
    retrying(ctx.store, lambda: _record_fix(ctx, claim, result))


def _record_fix(ctx: Context, claim: Claim, result: GateResult) -> None:
    with ctx.store.write() as conn:
        conn.execute(
            insert(REFS).values(
                item_id=claim.item,
                kind="fix",
                ref=ctx.store.relative(Path(result.log_path)) if result.log_path else "",
                reason=f"fix for {claim.milestone.name} after attempt {claim.attempt}: {result.reason}",
                at=result.finished_at,
            )
        )


# -- reclaiming -----------------------------------------------------------------------


def _expired(item: int, now: datetime, name: str | None = None, *, expiring: bool = True) -> Any:
    where = [
        MILESTONES.c.item_id == item,
        MILESTONES.c.status == MilestoneStatus.IN_PROGRESS.value,
        MILESTONES.c.lease_owner.is_not(None),
        *([MILESTONES.c.lease_expires < now] if expiring else []),
    ]
    if name is not None:
        where.append(MILESTONES.c.name == name)
    return select(MILESTONES.c.id, MILESTONES.c.name, MILESTONES.c.lease_owner, MILESTONES.c.lease_info).where(*where)


def reclaim_expired(ctx: Context, item: int, owner: str, cache: GraphCache | None = None) -> list[DoneResult]:
    """Milestones whose gate lease expired (their driver died, or froze):
    take the lease over for ``owner`` (one reclaimer wins), make sure the
    previous attempt's processes are gone when they ran on this machine
    (kill their process groups and wait), then record the attempt. When it
    had ended on its own, its files beside the log tell how, and that
    outcome counts (a gate that passed is not run again); otherwise it is
    ``interrupted``: no budget spent, the milestone is ready again. When
    the attempt ran on another machine, lease expiry is the only fence:
    that machine's gate supervisor killed the gate when its driver died."""
    now = ctx.clock()
    found = retrying(ctx.store, lambda: reclaimable(ctx, item, now))
    out = []
    for r, gone in found:
        recorded = _reclaim(ctx, item, r.id, r.name, r.lease_owner, r.lease_info, owner, now, release=True,
                            cache=cache, gone=gone)  # fmt: skip
        if recorded is not None:
            out.append(recorded)
    return out


def _reclaim_for_done(ctx: Context, item: int, name: str, owner: str, *, gone: bool = False) -> DoneResult | None:
    """Before ``done`` runs a gate by hand: a lease left by a driver that
    died (expired, or with ``gone`` held by a process proven dead on this
    machine) is taken over and its attempt fenced and recorded first, so its
    processes are gone and its attempt number is not reused. The milestone
    stays in progress."""
    now = ctx.clock()
    with ctx.store.read() as conn:
        r = conn.execute(_expired(item, now, name, expiring=not gone)).first()
    if r is None or (gone and not holder_gone(r.lease_info)):
        return None
    return _reclaim(ctx, item, r.id, name, r.lease_owner, r.lease_info, owner, now, release=False, gone=gone)


def _claimed_at(info: dict[str, Any], default: datetime) -> datetime:
    """When the lease's attempt was claimed, as its lease recorded it (older leases: ``default``)."""
    try:
        at = datetime.fromisoformat(str(info["claimed"]))
    except (KeyError, ValueError):
        return default
    return at if at.tzinfo is not None and at <= default else default


def _reclaim(ctx: Context, item: int, pk: int, name: str, old_owner: str, info: dict[str, Any] | None, owner: str,
             now: datetime, *, release: bool, cache: GraphCache | None = None,
             gone: bool = False) -> DoneResult | None:  # fmt: skip
    """Take over one expired lease (or, with ``gone``, the live lease of a
    holder proven dead), fence its attempt, record it (see
    :func:`reclaim_expired`). None when another driver got there first."""
    until = ctx.clock() + ctx.lease_ttl
    with ctx.store.write() as conn:
        taken = conn.execute(
            update(MILESTONES)
            .where(
                MILESTONES.c.id == pk,
                MILESTONES.c.lease_owner == old_owner,
                *([] if gone else [MILESTONES.c.lease_expires < now]),
                MILESTONES.c.status == MilestoneStatus.IN_PROGRESS.value,
            )
            .values(lease_owner=owner, lease_expires=until)
        )
        if taken.rowcount != 1:
            return None
        attempt = (conn.execute(rows.LAST_ATTEMPT, {"pk": pk}).scalar() or 0) + 1
        m = rows.with_deps(rows.MILESTONE_BY_PK.rows(conn, pk=pk))[0]
    crash_point("reclaim")
    info = info or {}
    log = Path(info["log"]) if info.get("log") else log_path(ctx, item, name, attempt)
    reproof = bool(info.get("reproof"))
    claim = Claim(item=item, pk=pk, milestone=m, attempt=attempt, owner=owner, log_path=str(log), reproof=reproof)
    me = host_identity()
    here = bool(info.get("boot")) and info.get("boot") == me["boot"] and info.get("host") == me["host"]
    # A lease taken over before it expired: its holder was proven dead here.
    lapse = f"lease of {shown_holder(old_owner)} " + ("freed, its process died" if gone else "expired")
    started = _claimed_at(info, now)  # the attempt ran from its claim, not from now
    result = interrupted_result(claim, started, reason=f"{lapse}: its driver stopped")
    if here:
        with LeaseKeeper(ctx, [claim]):
            killed = stop_attempt(attempt_files(log)[0], timeout=STOP_WAIT_SECONDS)
        if killed:
            groups = ", ".join(map(str, killed))
            result = interrupted_result(claim, started, reason=f"{lapse}; killed its process group(s) {groups}")
        else:
            recovered = recover_result(claim.milestone.gate, log, started, default_timeout=claim.milestone.timeout)
            if recovered.outcome is not Outcome.INTERRUPTED:
                why = f"{recovered.reason} (ended after its driver stopped; recovered from {log.name})"
                result = recovered.model_copy(update={"reason": why})
            else:  # its commands' time until the supervisor stopped them counts as gate time spent
                result = result.model_copy(update={"duration": recovered.duration})
        result = result.model_copy(update={"host": me["host"]})
    elif info.get("host"):
        result = interrupted_result(
            claim, started, reason=f"lease of {shown_holder(old_owner)} expired: its driver stopped"
        ).model_copy(update={"host": info["host"]})
    return record(ctx, claim, result, release=release, cache=cache)

"""Gate runs under a lease, recorded: the one path by which every gate
attempt reaches the store, whoever ran it: ``done`` (the gate runs here,
:mod:`.run_here`), the drive loop (the gate runs as a Prefect task),
``verify``, and the driver that takes over a dead driver's lease
(:mod:`.takeover`). A claim is a lease (:mod:`.leases`); :func:`record`
stores the run and applies its outcome, once per attempt; a passed run
elsewhere may stand in for a gate (:func:`cached_result`).
"""

from __future__ import annotations

import os
import socket
import threading
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from sqlalchemy import Connection, insert, select

from milepost._text import holder as shown_holder
from milepost.gates._crash import crash_point
from milepost.gates.attempt import AttemptFiles
from milepost.gates.command import GateResult, Outcome
from milepost.gates.inputs import Fingerprint
from milepost.gates.outcome import CachedFrom
from milepost.graph import steps
from milepost.graph.models import Milestone
from milepost.graph.status import Action, MilestoneStatus
from milepost.results import Claim, DoneResult, GateRun
from milepost.retry import retrying
from milepost.service import _rows as rows
from milepost.service import proofs
from milepost.service._rows import MILESTONES, REFS, RUNS
from milepost.service._tx import Context, GraphCache, ItemEvent, Tx, write

__all__ = [
    "already_recorded",
    "cached_result",
    "gate_env",
    "interrupted_result",
    "owner_here",
    "record",
    "record_fix",
    "record_step",
]


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
        outcome=Outcome.CACHED,
        reason=reason,
        tail=reason,
        started_at=now,
        finished_at=now,
        host=socket.gethostname(),
        fingerprint=fp.digest,
        inputs_digest=fp.inputs_digest,
        inputs_files=len(fp.files),
        cached_from=source,
    )
    return result, fp


# -- recording ------------------------------------------------------------------------


def record(
    ctx: Context,
    c: Claim,
    result: GateResult,
    *,
    verdict: str | None = None,
    release: bool = False,
    cache: GraphCache | None = None,
    manifest: dict[str, str] | None = None,
    final: bool = False,
) -> DoneResult:
    """:func:`record_step` in a write transaction of its own."""
    step = record_step(ctx, c, result, verdict=verdict, release=release, manifest=manifest, final=final)
    return write(ctx, c.item, step, cache=cache)


def record_step(
    ctx: Context,
    c: Claim,
    result: GateResult,
    *,
    verdict: str | None = None,
    release: bool = False,
    manifest: dict[str, str] | None = None,
    final: bool = False,
) -> Callable[[Tx], DoneResult]:
    """The step of a write transaction that stores a gate run (always: evidence is never dropped), frees
    the lease and applies the outcome while the milestone is still in progress: pass -> done (or in review),
    fail -> needs_fix (ready again after the retry delay) or stuck. An interrupted run spends no budget; with
    ``release`` the milestone becomes ready again (the drive loop), without it stays in progress (``done``
    interrupted by hand). A re-proof (``c.reproof``) that passes spends no budget; one that fails reopens the
    done milestones built on it (pending behind it); one interrupted leaves the milestone done. A passing
    run's fingerprint becomes the milestone's proof, and its file list (``manifest``, else the file beside
    its log) is kept for the reasons of a later stale view. A ``final`` failure makes the milestone stuck
    whatever retries are left (no doer may start any more: its budget is spent, docs/doers.md).

    Only the lease's holder records: when another driver took the lease over (this one was frozen or cut off
    from the database long enough for it to expire), that driver records this attempt; nothing is written here."""

    def fn(tx: Tx) -> DoneResult:
        m = tx.find_pk(c.pk, c.milestone.name)
        not_ours = _free_lease(tx, c, m, result)
        if not_ours is not None:
            return not_ours
        tx.dirty = True
        if not c.milestone.has_gate:
            return _finish_without_gate(tx, c, m, result, verdict)
        run = _store_run(ctx, tx, c, result, verdict, manifest)
        base: dict[str, Any] = {"item": tx.id, "revision": tx.next_revision, "gate_run": run}
        if m.status is not MilestoneStatus.IN_PROGRESS or m.awaiting_review:
            tx.emit(ItemEvent.GATE_RUN, m.name, m.status.value, m.status.value, result.reason)
            return DoneResult(
                **base,
                milestone=m,
                passed=result.passed,
                note=f"{m.name!r} became {m.status.value} while its gate ran: the run is kept as evidence only",
            )
        return _apply_outcome(tx, c, m, result, release, base, final=final)

    return fn


def _free_lease(tx: Tx, c: Claim, m: Milestone, result: GateResult) -> DoneResult | None:
    """Free the lease where this driver holds it; when it does not (any more), the
    result that says so, and nothing else is written."""
    # The lease freed where this driver holds it (one statement: its row count says whether it did).
    if rows.DROP_LEASE.run(tx.conn, pk=c.pk, owner=c.owner) == 1:
        holder: str | None = c.owner
    else:
        holder = rows.LEASE_ROW.rows(tx.conn, pk=c.pk)[0].lease_owner
    if holder is None and already_recorded(tx.conn, c):
        # Recorded by whoever the lease passed to, or by this very write before its connection dropped.
        return DoneResult(
            item=tx.id,
            revision=tx.revision,
            milestone=m,
            passed=result.passed,
            note=f"attempt {c.attempt} of {m.name!r} is in the store already; this outcome is not applied again",
        )
    if holder != c.owner:
        return DoneResult(
            item=tx.id,
            revision=tx.revision,
            milestone=m,
            passed=result.passed,
            note=f"the lease of {m.name!r} passed to {shown_holder(holder or 'another driver')} while its gate ran"
            f" (attempt {c.attempt}); that driver records the attempt, this outcome is not applied",
        )
    return None


def _store_run(
    ctx: Context, tx: Tx, c: Claim, result: GateResult, verdict: str | None, manifest: dict[str, str] | None
) -> GateRun:
    """Store the gate run, its units' passes, a passing run's file list, and its evidence ref."""
    stored = ctx.store.relative(Path(result.log_path)) if result.log_path else None
    run = GateRun(**result.model_dump(), item=tx.id, milestone=c.milestone.name, attempt=c.attempt, verdict=verdict)
    source = _source_run_id(tx, result)
    rows.ADD_RUN.run(tx.conn, **rows.run_row(tx.id, c.pk, c.attempt, result, stored, verdict, source))
    if c.milestone.cache:  # (cache: false: its results are not a function of its inputs, not offered to others)
        proofs.store_unit_passes(tx.conn, tx.id, c.milestone.name, c.attempt, result)
    if result.passed and result.inputs_digest:
        files = manifest
        if files is None and result.log_path:
            files = AttemptFiles(Path(result.log_path)).read_inputs(result.inputs_digest)
        if files is not None:
            proofs.store_manifest(tx.conn, result.inputs_digest, files)
    # Every gate run is evidence of the work item.
    outcome = result.outcome.value  # ("cached: passed as ...", "interrupted: ...": the outcome once)
    said = result.reason if result.reason.startswith(f"{outcome}:") else f"{outcome} ({result.reason})"
    rows.ADD_REF.run(
        tx.conn,
        item_id=tx.id,
        kind="gate_run",
        ref=stored or "",
        reason=f"{c.milestone.name} attempt {c.attempt}: {said}",
        at=result.finished_at,
    )
    return run


def _apply_outcome(
    tx: Tx, c: Claim, m: Milestone, result: GateResult, release: bool, base: dict[str, Any], *, final: bool = False
) -> DoneResult:
    """The run's outcome applied to the milestone in progress (see :func:`record_step`)."""
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
        return _reproof_failed(tx, c, m, result, base)
    else:
        change = steps.record_attempt(
            m,
            result.passed,
            None if result.passed else result.reason,
            at=result.finished_at,
            free=c.reproof or result.outcome is Outcome.CACHED,
            fingerprint=result.fingerprint,
            final=final and not result.passed,
        )
    out = tx.save(c.pk, [change])
    crash_point("record")
    return DoneResult(**base, milestone=change.after, passed=result.passed, changes=out)


def _reproof_failed(tx: Tx, c: Claim, m: Milestone, result: GateResult, base: dict[str, Any]) -> DoneResult:
    """The second verification failed: what was built on it waits behind it."""
    g = tx.graph().graph
    change = g.record_attempt(
        m.name, False, result.reason, at=result.finished_at, free=True, fingerprint=result.fingerprint
    )
    reopened = g.reopen_dependents(m.name, f"its re-proof failed: {result.reason}")
    out = tx.save(c.pk, [change, *reopened], applied=True)
    crash_point("record")
    return DoneResult(**base, milestone=change.after, passed=False, changes=out)


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


def already_recorded(conn: Connection, claim: Claim) -> bool:
    """Whether the store holds ``claim``'s attempt: recording an attempt
    twice is refused by the store (``gate_runs`` is unique per milestone and
    attempt), and a write retried after a lost connection sees here that
    its first try committed."""
    found = conn.execute(
        select(RUNS.c.id).where(RUNS.c.milestone_id == claim.pk, RUNS.c.attempt == claim.attempt)
    ).first()
    return found is not None

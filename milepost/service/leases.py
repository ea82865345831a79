"""Leases: a claim is a lease in the store. :func:`take_lease` numbers the
attempt and records where it runs (host, boot, pid, log), a
:class:`LeaseKeeper` renews the leases it holds while their gates run, and a
lease another owner holds is either live (refused) or expired
(:class:`ExpiredLease`: its attempt is fenced and recorded first, see
:func:`~milepost.service.claims.reclaim_expired`)."""

from __future__ import annotations

import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from types import TracebackType
from typing import Any

from sqlalchemy import Connection, select, update

from milepost._text import holder
from milepost.errors import EnvironmentProblem, TransitionError
from milepost.gates.liveness import holder_gone
from milepost.gates.supervisor import own_identity
from milepost.graph.models import Milestone
from milepost.graph.steps import Change
from milepost.results import Claim
from milepost.service import _rows as rows
from milepost.service._rows import ITEMS, MILESTONES
from milepost.service._tx import Context, Tx

__all__ = ["ExpiredLease", "HeldElsewhere", "LeaseKeeper", "expired", "held_by_others", "held_elsewhere", "log_path",
           "renew", "take_lease"]  # fmt: skip


def log_path(ctx: Context, item_id: int, name: str, attempt: int) -> Path:
    return ctx.store.evidence_dir("logs") / f"item-{item_id}" / name / f"attempt-{attempt}.log"


class ExpiredLease(Exception):
    """A claim found another owner's expired lease, or (``gone``) the live
    lease of a holder proven dead on this machine: reclaim it first."""

    def __init__(self, gone: bool = False) -> None:
        super().__init__("gone" if gone else "expired")
        self.gone = gone


def held_elsewhere(lease: Any, owner: str) -> bool:
    return bool(lease.lease_owner) and lease.lease_owner != owner


def expired(lease: Any, now: datetime) -> bool:
    return lease.lease_expires is None or lease.lease_expires <= now


def take_lease(tx: Tx, pk: int, m: Milestone, owner: str, *, reproof: bool = False,
               start: Sequence[Change] = ()) -> Claim:  # fmt: skip
    """Lease an in-progress milestone's gate to ``owner`` and number its
    attempt; the lease records where the attempt runs (host, boot, pid, log)
    and whether it re-proves a done milestone, so a driver that reclaims it
    can fence it and hand it back the right way. ``start``: the changes,
    made on the graph at hand already, that put ``m`` in progress (its own
    first), saved here, its own in the same row write as the lease (one
    statement where three were; a drive makes one a gate).

    Another owner's lease refuses (for a start, any lease: a milestone not in
    progress holds none of its own), and nothing is written: expired, its
    attempt must be fenced and recorded first (:class:`ExpiredLease`); live,
    its gate is running (:class:`TransitionError`)."""
    now = tx.ctx.clock()
    attempt = (rows.LAST_ATTEMPT_OF.rows(tx.conn, pk=pk)[0]["last"] or 0) + 1
    log = log_path(tx.ctx, tx.id, m.name, attempt)
    # (When it was claimed: a driver that reclaims it records the attempt from then.)
    info: dict[str, Any] = {**own_identity(), "log": str(log), "claimed": now.isoformat()}
    if reproof:
        info["reproof"] = True
    lease = {"pk": pk, "owner": owner, "expires": now + tx.ctx.lease_ttl, "info": info}
    if start:
        took = rows.START_LEASED.run(tx.conn, now=now, **lease, **rows.milestone_state(start[0].after))
    else:
        took = rows.TAKE_LEASE.run(tx.conn, **lease)
    if took != 1:  # another owner holds it: nothing was written
        held = rows.LEASE_ROW.rows(tx.conn, pk=pk)[0]
        if expired(held, now):
            raise ExpiredLease  # its attempt must be fenced and recorded first
        raise TransitionError(
            f"cannot run the gate of {m.name!r}: it is already running ({holder(held.lease_owner)},"
            f" lease until {held.lease_expires:%H:%M:%S} UTC); wait for it or let the lease expire",
            milestone=m.name,
            holder=held.lease_owner,
        )
    if start:
        tx.save(pk, start, applied=True, written=1)
    return Claim(item=tx.id, pk=pk, milestone=m, attempt=attempt, owner=owner, log_path=str(log), reproof=reproof)


class LeaseKeeper:
    """Renews the leases of the claims it holds, in a thread, every quarter
    of their lifetime, while a block runs: ``with LeaseKeeper(ctx, [claim]):``."""

    def __init__(self, ctx: Context, claims: Iterable[Claim] = ()) -> None:
        self.ctx = ctx
        self._claims = {c.owner + str(c.pk): c for c in claims}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="milepost-leases", daemon=True)

    def add(self, claim: Claim) -> None:
        with self._lock:
            self._claims[claim.owner + str(claim.pk)] = claim

    def remove(self, claim: Claim) -> None:
        with self._lock:
            self._claims.pop(claim.owner + str(claim.pk), None)

    def renew(self) -> None:
        with self._lock:
            claims = list(self._claims.values())
        if not claims:
            return
        with self.ctx.store.write() as conn:
            for c in claims:
                renew(conn, self.ctx, c)

    def _run(self) -> None:
        while not self._stop.wait(self.ctx.lease_ttl.total_seconds() / 4):
            try:
                self.renew()
            except EnvironmentProblem:
                continue  # database unreachable or locked for a moment: retried, the lease has slack for three

    def __enter__(self) -> LeaseKeeper:
        self._thread.start()
        return self

    def __exit__(self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None) -> None:
        self._stop.set()
        self._thread.join(timeout=10)


def renew(conn: Connection, ctx: Context, c: Claim) -> None:
    conn.execute(
        update(MILESTONES)
        .where(MILESTONES.c.id == c.pk, MILESTONES.c.lease_owner == c.owner)
        .values(lease_expires=ctx.clock() + ctx.lease_ttl)
    )


@dataclass(frozen=True)
class HeldElsewhere:
    """What other drivers hold of an item: its revision, and the milestones
    whose lease another owner holds live (milestone -> holder)."""

    revision: int
    leases: dict[str, str] = field(default_factory=dict)


def held_by_others(ctx: Context, item: int, owner: str, scope: set[str] | None = None) -> HeldElsewhere:
    """The live leases on ``item``'s milestones (of ``scope``; None: all)
    held by another owner than ``owner``, read in one transaction with the
    item's revision. An expired lease, or one whose holder died on this
    machine, is not live: a drive reclaims it instead of waiting on it."""
    now = ctx.clock()
    query = select(MILESTONES.c.name, MILESTONES.c.lease_owner, MILESTONES.c.lease_expires, MILESTONES.c.lease_info)
    query = query.where(MILESTONES.c.item_id == item, MILESTONES.c.lease_owner.is_not(None),
                        MILESTONES.c.lease_owner != owner)  # fmt: skip
    with ctx.store.read() as conn:
        revision = conn.execute(select(ITEMS.c.revision).where(ITEMS.c.id == item)).scalar_one()
        found = conn.execute(query).all()
    held = {
        r.name: str(r.lease_owner)
        for r in found
        if (scope is None or r.name in scope) and not expired(r, now) and not holder_gone(r.lease_info)
    }
    return HeldElsewhere(int(revision), dict(sorted(held.items())))

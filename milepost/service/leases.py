"""Leases: a claim is a lease in the store. :func:`take_lease` numbers the
attempt and records where it runs (host, boot, pid, log), a
:class:`LeaseKeeper` renews the leases it holds while their gates run, and a
lease another owner holds is either live (refused) or expired
(:class:`ExpiredLease`: its attempt is fenced and recorded first, see
:mod:`milepost.service.takeover`)."""

from __future__ import annotations

import threading
from collections.abc import Iterable, Sequence
from datetime import datetime
from types import TracebackType
from typing import Any

from sqlalchemy import Connection, update

from milepost._text import holder
from milepost.errors import EnvironmentProblem, TransitionError
from milepost.gates.attempt import AttemptFiles
from milepost.gates.supervisor import own_identity
from milepost.graph.models import Milestone
from milepost.graph.steps import Change
from milepost.results import Claim
from milepost.service import _rows as rows
from milepost.service._rows import MILESTONES
from milepost.service._tx import Context, Tx

__all__ = ["ExpiredLease", "LeaseKeeper", "expired", "held_elsewhere", "renew", "take_lease"]


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


def take_lease(
    tx: Tx, pk: int, m: Milestone, owner: str, *, reproof: bool = False, start: Sequence[Change] = ()
) -> Claim:
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
    log = AttemptFiles.of(tx.ctx.store.evidence_dir("logs"), tx.id, m.name, attempt).log
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
    until = lease["expires"]
    return Claim(
        item=tx.id,
        pk=pk,
        milestone=m,
        attempt=attempt,
        owner=owner,
        log_path=str(log),
        reproof=reproof,
        leased_until=until,
    )


class LeaseKeeper:
    """Renews the leases of the claims it holds, in a thread, every quarter
    of their lifetime, while a block runs: ``with LeaseKeeper(ctx, [claim]):``."""

    def __init__(self, ctx: Context, claims: Iterable[Claim] = ()) -> None:
        self.ctx = ctx
        self._claims = {c.owner + str(c.pk): c for c in claims}
        self._until: dict[str, datetime] = {}  # (the latest expiry this keeper wrote, per claim)
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="milepost-leases", daemon=True)

    def add(self, claim: Claim) -> None:
        with self._lock:
            self._claims[claim.owner + str(claim.pk)] = claim

    def remove(self, claim: Claim) -> None:
        with self._lock:
            self._claims.pop(claim.owner + str(claim.pk), None)
            self._until.pop(claim.owner + str(claim.pk), None)

    def confirm(self, claim: Claim) -> bool:
        """Whether ``claim``'s lease is still this owner's, renewed for a
        whole lifetime if so: asked of the store (one conditional write)
        right before its gate or doer starts and before a passed doer
        attempt is merged. False when another driver took it over (this one
        stalled past its expiry after the claim), which has fenced and
        recorded the attempt: it must not start. A store out of reach cannot
        say: True only while the lease known here has not expired.

        (Answering from this process's clock within the first quarter of a
        lease it took saved 6% of a drive of 200 `true` gates, under the 10%
        a fast path must earn: docs/benchmarks.md.)"""
        with self._lock:
            until = max(filter(None, (claim.leased_until, self._until.get(claim.owner + str(claim.pk)))), default=None)
        try:
            renewed = self.ctx.clock() + self.ctx.lease_ttl
            with self.ctx.store.write() as conn:
                if not renew(conn, self.ctx, claim):
                    return False
        except EnvironmentProblem:
            return until is not None and self.ctx.clock() < until
        with self._lock:
            if claim.owner + str(claim.pk) in self._claims:
                self._until[claim.owner + str(claim.pk)] = renewed
        return True

    def renew(self) -> None:
        with self._lock:
            claims = list(self._claims.values())
        if not claims:
            return
        until = self.ctx.clock() + self.ctx.lease_ttl
        with self.ctx.store.write() as conn:
            kept = [c for c in claims if renew(conn, self.ctx, c)]
        with self._lock:
            for c in kept:
                self._until[c.owner + str(c.pk)] = until

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


def renew(conn: Connection, ctx: Context, c: Claim) -> int:
    """Push ``c``'s lease out by a lifetime if ``c.owner`` still holds it; 1 if so, else 0."""
    return conn.execute(
        update(MILESTONES)
        .where(MILESTONES.c.id == c.pk, MILESTONES.c.lease_owner == c.owner)
        .values(lease_expires=ctx.clock() + ctx.lease_ttl)
    ).rowcount

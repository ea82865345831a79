"""What a drive recovers after a fault: which leases it may take over now,
and whether an attempt is in the store already.

A lease is taken over when it expired (its holder stopped renewing it) or,
before it expires, when its holder is provably gone: it ran on this machine,
in this boot, and its process has died (:func:`milepost.gates.liveness.holder_gone`).
A driver that exited for a lost database, or was killed, is then recovered
at once by the next drive on the same machine, from the attempt's files.

Recording an attempt twice is refused by the store (``gate_runs`` is unique
per milestone and attempt); :func:`already_recorded` lets a write that is
retried after a lost connection see that its first try committed.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import Connection, select

from milepost.gates.liveness import holder_gone
from milepost.graph.status import MilestoneStatus
from milepost.results import Claim
from milepost.service._rows import MILESTONES, RUNS
from milepost.service._tx import Context

__all__ = ["already_recorded", "reclaimable"]


def reclaimable(ctx: Context, item: int, now: datetime) -> list[tuple[Any, bool]]:
    """The item's leased in-progress milestones that may be taken over now:
    (row, gone) with ``gone`` True for a lease that has not expired but whose
    holder is dead."""
    query = select(
        MILESTONES.c.id, MILESTONES.c.name, MILESTONES.c.lease_owner, MILESTONES.c.lease_info,
        MILESTONES.c.lease_expires,
    ).where(
        MILESTONES.c.item_id == item,
        MILESTONES.c.status == MilestoneStatus.IN_PROGRESS.value,
        MILESTONES.c.lease_owner.is_not(None),
    )  # fmt: skip
    with ctx.store.read() as conn:
        rows = conn.execute(query).all()
    out = []
    for r in rows:
        if r.lease_expires is None or r.lease_expires < now:
            out.append((r, False))
        elif holder_gone(r.lease_info):
            out.append((r, True))
    return out


def already_recorded(conn: Connection, claim: Claim) -> bool:
    """Whether the store holds ``claim``'s attempt."""
    found = conn.execute(
        select(RUNS.c.id).where(RUNS.c.milestone_id == claim.pk, RUNS.c.attempt == claim.attempt)
    ).first()
    return found is not None

"""What a drive loop keeps while it runs: :class:`DriveSession` owns the
item's whole graph (cached between its transactions and kept in step with
its own writes, so a claim costs O(log n)), the milestones it holds out of
the schedule (retry delays, ``--until``), and the lease keeper of its gates.
"""

from __future__ import annotations

from milepost.gates._crash import crash_point
from milepost.gates.command import GateResult
from milepost.graph.dag import WorkGraph
from milepost.graph.status import Action
from milepost.results import Claim, DoneResult
from milepost.service import claims, items
from milepost.service._tx import Context, GraphCache, Tx, write

__all__ = ["DriveSession"]


class DriveSession:
    """One drive of one work item by one ``owner`` (a lease holder's name)."""

    def __init__(self, ctx: Context, item: int, owner: str) -> None:
        self.ctx = ctx
        self.item = item
        self.owner = owner
        self.cache = GraphCache()
        self.leases = claims.LeaseKeeper(ctx)

    @property
    def graph(self) -> WorkGraph:
        """The item's graph as this drive knows it (read on first use, or
        when another writer changed the item since)."""
        with self.ctx.store.read() as conn:
            return items.graph_of(conn, items.head(conn, self.item), self.cache).graph

    def claim_next(self, expect_revision: int | None = None) -> Claim | None:
        """The lowest-id ready milestone becomes in_progress with a lease for
        this drive, in one transaction. ``expect_revision`` guards a drive's
        first claim (``drive --expect-revision``)."""

        def fn(tx: Tx) -> Claim | None:
            tx.check_open()
            loaded = tx.graph()
            m = loaded.graph.next_ready()
            if m is None:
                return None
            changes = loaded.graph.apply(m.name, Action.START)
            tx.save(loaded.pks[m.name], changes, applied=True)
            claim = claims.take_lease(tx, loaded.pks[m.name], changes[0].after, self.owner)
            crash_point("claim")
            return claim

        return write(self.ctx, self.item, fn, expect_revision, cache=self.cache)

    def record(self, claim: Claim, result: GateResult, *, release: bool = False) -> DoneResult:
        return claims.record(self.ctx, claim, result, release=release, cache=self.cache)

    def record_fix(self, claim: Claim, result: GateResult) -> None:
        claims.record_fix(self.ctx, claim, result)

    def reclaim_expired(self) -> list[DoneResult]:
        """Expired leases of this item (drivers that died): fenced and recorded."""
        return claims.reclaim_expired(self.ctx, self.item, self.owner, cache=self.cache)

    def gate_env(self, claim: Claim) -> dict[str, str]:
        return claims.gate_env(self.ctx, claim)

    # -- holds ---------------------------------------------------------------

    def hold(self, name: str) -> None:
        """Keep ``name`` out of :meth:`claim_next` (this drive only)."""
        self.cache.hold(self.item, name)

    def unhold(self, name: str) -> None:
        self.cache.unhold(self.item, name)

    def set_holds(self, names: set[str]) -> None:
        for name in list(self.cache.holds.get(self.item, set())):
            self.unhold(name)
        for name in names:
            self.hold(name)

"""The write path: one transaction per state change, guarded by the item's
revision, reading and writing only the rows the change needs.

Every write starts by locking the item's row (``SELECT ... FOR UPDATE`` on
PostgreSQL; SQLite's ``BEGIN IMMEDIATE`` already serializes writers), runs
the operation on a :class:`Tx`, and ends with a compare-and-swap of the
revision (``UPDATE work_items SET revision = r + 1 WHERE id = :id AND
revision = r``) and the operation's typed :class:`Event` rows. A lost CAS
re-runs the operation on fresh data; ``expect_revision`` refuses stale callers.

A transition reads the milestone's row and its deps' statuses
(:meth:`Tx.find`), never the whole graph. Operations that need the whole
graph (a drive's claim, reopening dependents, completing the item) ask for
it (:meth:`Tx.graph`). A :class:`GraphCache` keeps whole graphs between
transactions (a drive, the MCP server): a cached graph is used while the
stored revision is the one it was kept at, and every write of the owning
service is applied to it as well (kept in step), so it stays valid.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from enum import StrEnum
from typing import TYPE_CHECKING, Any, TypeVar

from sqlalchemy import Connection, Row, select

from milepost._schema import utcnow
from milepost.errors import ConcurrentUpdateError, NotFoundError, NotOwnerError, StaleRevisionError
from milepost.graph.dag import WorkGraph
from milepost.graph.hints import known_names
from milepost.graph.item import check_open
from milepost.graph.models import Milestone
from milepost.graph.status import Action, ItemState, MilestoneStatus, PlanStatus
from milepost.graph.steps import Change
from milepost.results import MilestoneChange
from milepost.retry import retrying
from milepost.service import _rows as rows
from milepost.service._prepared import Record
from milepost.service._rows import DEPS, MILESTONES

if TYPE_CHECKING:
    from milepost.store import Store

__all__ = ["Context", "Event", "GraphCache", "ItemEvent", "Loaded", "Tx", "load_graph", "write"]

T = TypeVar("T")
# Under contention the revision CAS loses and the operation re-runs on fresh data.
MAX_CAS_RETRIES = 20


class ItemEvent(StrEnum):
    """Kinds of event-log rows besides the milestone actions (:class:`Action`)."""

    CREATE = "create"
    OBJECTIVE = "objective"
    PLAN_STATUS = "plan_status"
    TODO = "todo"
    BLOCKED_BY = "blocked_by"
    CLEAR_BLOCKER = "clear_blocker"
    RECHECK_AT = "recheck_at"
    RECHECK = "recheck"
    WAIT = "wait"
    WAKE = "wake"
    REF = "ref"
    COMPLETE = "complete"
    CANCEL = "cancel"
    ADD = "add"
    REMOVE = "remove"
    GATE_RUN = "gate_run"  # a run kept as evidence only (the milestone had moved on)
    INTERRUPTED = "interrupted"  # a hand-run gate interrupted: the milestone stays in progress
    REVISE = "revise"  # a plan revision (plan apply --item, edit): its reason names what changed
    EDIT = "edit"  # a milestone's definition changed by a revision: its reason names the fields


@dataclass(frozen=True)
class Event:
    """One row of an item's event log."""

    kind: Action | ItemEvent
    milestone: str | None = None
    before: str | None = None
    after: str | None = None
    reason: str | None = None


@dataclass
class Loaded:
    """A whole milestone graph as of ``revision``, with the rows' keys."""

    graph: WorkGraph
    pks: dict[str, int]
    revision: int


@dataclass
class GraphCache:
    """Whole graphs kept between transactions, and the milestones a driver
    holds out of its schedule (in memory only)."""

    graphs: dict[int, Loaded] = field(default_factory=dict)
    holds: dict[int, set[str]] = field(default_factory=dict)

    def get(self, item: int, revision: int) -> Loaded | None:
        loaded = self.graphs.get(item)
        return loaded if loaded is not None and loaded.revision == revision else None

    def drop(self, item: int) -> None:
        self.graphs.pop(item, None)

    def hold(self, item: int, name: str) -> None:
        self.holds.setdefault(item, set()).add(name)
        if item in self.graphs and name in self.graphs[item].graph:
            self.graphs[item].graph.hold(name)

    def unhold(self, item: int, name: str) -> None:
        self.holds.get(item, set()).discard(name)
        if item in self.graphs:
            self.graphs[item].graph.unhold(name)


@dataclass
class Context:
    """What every operation needs: the store, who acts, the lease lifetime,
    the clock leases are taken, renewed and found expired by (the time now,
    in UTC; a test moves its own instead of sleeping out a lease), and the
    service's own graph cache (None: no caching)."""

    store: Store
    agent: str
    operator: bool = False
    lease_ttl: timedelta = timedelta(seconds=60)
    cache: GraphCache | None = None
    clock: Callable[[], datetime] = utcnow


def load_graph(conn: Connection, item_id: int, holds: Iterable[str] = ()) -> Loaded:
    """Every milestone of an item, as a graph (reads O(n) rows)."""
    mrows = conn.execute(select(MILESTONES).where(MILESTONES.c.item_id == item_id).order_by(MILESTONES.c.seq)).all()
    by_pk = {r.id: r.name for r in mrows}
    deps: dict[int, list[str]] = {}
    for mid, did in conn.execute(
        select(DEPS.c.milestone_id, DEPS.c.dep_id)
        .where(DEPS.c.item_id == item_id)
        .order_by(DEPS.c.milestone_id, DEPS.c.position)
    ):
        deps.setdefault(mid, []).append(by_pk[did])
    # Stored graphs were validated when written: no second cycle check.
    graph = WorkGraph((rows.milestone(r, deps.get(r.id, [])) for r in mrows), validate=False)
    for name in holds:
        if name in graph:
            graph.hold(name)
    return Loaded(graph, {r.name: r.id for r in mrows}, 0)


def change_result(c: Change) -> MilestoneChange:
    return MilestoneChange(
        milestone=c.after.name, action=c.action, from_status=c.before.status, to_status=c.after.status, reason=c.reason
    )


class Tx:
    """One write transaction on one work item: its row (read fresh, locked),
    the events to log, and the rows an operation reads and writes."""

    def __init__(self, ctx: Context, conn: Connection, head: Row[Any] | Record, cache: GraphCache | None) -> None:
        self.ctx = ctx
        self.conn = conn
        self.head = head
        self._id = int(head.id)
        self._row: Any = None
        self.revision: int = head.revision
        self.events: list[Event] = []
        self.dirty = False
        self._cache = cache
        self._loaded = cache.get(head.id, head.revision) if cache is not None else None
        # What find() read: each milestone's row (its lease columns too) and its deps.
        self.rows: dict[int, Record] = {}
        self._deps: dict[int, list[Milestone]] = {}

    @property
    def id(self) -> int:
        return self._id

    @property
    def row(self) -> Any:
        """The item's whole row (waits, todos, defaults, blocker), read on first use."""
        if self._row is None:
            self._row = rows.ITEM_ROW.rows(self.conn, item=self._id)[0]
        return self._row

    @property
    def state(self) -> ItemState:
        return ItemState(self.head.state)

    @property
    def plan_status(self) -> PlanStatus:
        return PlanStatus(self.head.plan_status)

    @property
    def next_revision(self) -> int:
        """The revision this transaction commits."""
        return self.revision + 1

    def check_open(self) -> None:
        check_open(self.id, self.state)

    def in_progress(self, *, in_review: bool = True) -> list[str]:
        """Names of the item's in-progress milestones, by id (without those
        waiting for review unless ``in_review``)."""
        where = [MILESTONES.c.item_id == self.id, MILESTONES.c.status == MilestoneStatus.IN_PROGRESS.value]
        if not in_review:
            where.append(MILESTONES.c.awaiting_review.is_(False))
        query = select(MILESTONES.c.name).where(*where).order_by(MILESTONES.c.seq)
        return list(self.conn.execute(query).scalars())

    def check_owner(self) -> None:
        """An agent changes only its own items; an operator may change any."""
        owner = self.head.agent
        if owner != self.ctx.agent and not self.ctx.operator:
            raise NotOwnerError(
                f"work item {self.id} belongs to agent {owner!r}, not {self.ctx.agent!r}:"
                f" act as that agent (--agent {owner}) or as an operator (--operator)",
                item=self.id,
                owner=owner,
            )

    def check_revision(self, expect_revision: int | None) -> None:
        check_revision(self.id, self.revision, expect_revision)

    def emit(
        self,
        kind: Action | ItemEvent,
        milestone: str | None = None,
        before: str | None = None,
        after: str | None = None,
        reason: str | None = None,
    ) -> None:
        """Log an event; the transaction bumps the revision."""
        self.events.append(Event(kind, milestone, before, after, reason))
        self.dirty = True

    # -- milestones ---------------------------------------------------------

    def graph(self) -> Loaded:
        """The whole graph (cached, or read now: O(n)); changes saved with
        ``applied=True`` are the ones made to it."""
        if self._loaded is None:
            holds = self._cache.holds.get(self.id, ()) if self._cache is not None else ()
            self._loaded = load_graph(self.conn, self.id, holds)
        return self._loaded

    def forget_graph(self) -> None:
        """The graph changed shape (a plan revision): neither the graph at
        hand nor the cached one stands for it any more; the next read loads it."""
        self._loaded = None
        if self._cache is not None:
            self._cache.drop(self.id)

    def at_hand(self) -> Loaded | None:
        """The whole graph when this transaction has it (cached or read), to keep in step."""
        return self._loaded

    def find(self, name: str) -> tuple[int, Milestone]:
        """One milestone and its row's key: from the graph when it is at
        hand, else one query (the row, its deps' names and statuses) —
        never the whole graph."""
        if self._loaded is not None:
            m = self._loaded.graph.get(name)
            return self._loaded.pks[name], m
        found = rows.ONE_MILESTONE.rows(self.conn, item=self.id, name=name)
        if not found:
            raise unknown_milestone(self.conn, self.id, name)
        return self._keep(found)

    def find_pk(self, pk: int, name: str) -> Milestone:
        if self._loaded is not None:
            return self._loaded.graph.get(name)
        return self._keep(rows.MILESTONE_BY_PK.rows(self.conn, pk=pk))[1]

    def _keep(self, found: list[Record]) -> tuple[int, Milestone]:
        m, deps = rows.with_deps(found)
        pk = int(found[0].id)
        self._deps[pk] = deps
        self.rows[pk] = found[0]
        return pk, m

    def undone_deps(self, pk: int, m: Milestone) -> list[Milestone]:
        """``m``'s deps that are not done (their names and statuses)."""
        if self._loaded is not None:
            return self._loaded.graph.undone_deps(m.name)
        if pk not in self._deps:
            self.find_pk(pk, m.name)
        return [d for d in self._deps[pk] if d.status is not MilestoneStatus.DONE]

    def save(
        self, pk: int, changes: Iterable[Change], *, applied: bool = False, written: int = 0
    ) -> list[MilestoneChange]:
        """Write what ``changes`` changed (one row each) and log them. Unless
        ``applied`` (made on :meth:`graph` already), the graph at hand gets them too.
        The first ``written`` rows the caller wrote itself (a claim: with its lease)."""
        out = []
        now = utcnow()
        for i, c in enumerate(changes):
            name = c.after.name
            key = self._loaded.pks[name] if self._loaded is not None and name in self._loaded.pks else pk
            if i >= written:
                rows.SAVE_STATE.run(self.conn, pk=key, now=now, **rows.milestone_state(c.after))
            if not applied and self._loaded is not None:
                self._loaded.graph.put(c.after)
            self.emit(c.action, c.after.name, c.before.status.value, c.after.status.value, c.reason)
            out.append(change_result(c))
        return out

    # -- the end -------------------------------------------------------------

    def commit(self) -> None:
        """Bump the revision (compare-and-swap) and log the events, when anything changed."""
        if not self.dirty:
            return
        new = self.next_revision
        now = utcnow()
        if rows.BUMP_REVISION.run(self.conn, item=self.id, old=self.revision, new=new, now=now) != 1:
            raise LostRace
        if self.events:
            rows.ADD_EVENTS.run_many(
                self.conn,
                ("milestone", "action", "from_status", "to_status", "reason"),
                [(e.milestone, e.kind.value, e.before, e.after, e.reason) for e in self.events],
                {"item_id": self.id, "agent": self.ctx.agent, "revision": new, "at": now},
            )
        self.revision = new

    def keep(self) -> None:
        """After the commit: the graph at hand, kept in step, is valid at the new revision."""
        if self._cache is not None and self._loaded is not None:
            self._loaded.revision = self.revision
            self._cache.graphs[self.id] = self._loaded


def unknown_milestone(conn: Connection, item_id: int, name: str) -> NotFoundError:
    """The refusal for a milestone the item does not have: the closest name it has, and the first ones."""
    query = select(MILESTONES.c.name).where(MILESTONES.c.item_id == item_id).order_by(MILESTONES.c.seq)
    known = conn.execute(query).scalars().all()
    if name.isdigit():  # (a milestone's name starts with a letter: a number names none, never an item)
        why = f"a milestone's name starts with a letter; for work item {name}, pass --item {name}"
        listed = known_names(name, known, suggest=False)
        return NotFoundError(f"no milestone {name!r} ({why}); {listed}", milestone=name)
    return NotFoundError(f"no milestone {name!r} in this work item; {known_names(name, known)}", milestone=name)


class LostRace(Exception):
    """The revision CAS found another writer first: re-run on fresh data."""


def check_revision(item_id: int, revision: int, expect_revision: int | None) -> None:
    if expect_revision is not None and revision != expect_revision:
        raise StaleRevisionError(
            f"work item {item_id} is at revision {revision}, not {expect_revision}:"
            " someone changed it since you read it; read it again and retry",
            item=item_id,
            expected=expect_revision,
            actual=revision,
        )


def write(
    ctx: Context,
    item_id: int,
    fn: Callable[[Tx], T],
    expect_revision: int | None = None,
    *,
    cache: GraphCache | None = None,
    check_owner: bool = True,
) -> T:
    """Run ``fn`` in a write transaction on fresh data (see the module's
    docstring); ``cache`` defaults to the service's own."""
    cache = ctx.cache if cache is None else cache

    def attempt() -> T:
        try:
            with ctx.store.write() as conn:
                found = rows.LOCK_ITEM.rows(conn, item=item_id)
                if not found:
                    raise NotFoundError(f"no work item {item_id}; see `milepost item list`", item=item_id)
                tx = Tx(ctx, conn, found[0], cache)
                if check_owner:
                    tx.check_owner()
                tx.check_revision(expect_revision)
                result = fn(tx)
                tx.commit()
        except BaseException:
            # ``fn`` may have changed the cached graph before it failed.
            if cache is not None:
                cache.drop(item_id)
            raise
        tx.keep()
        return result

    for _ in range(MAX_CAS_RETRIES):
        try:
            # A dropped connection (a database restart) is retried on fresh data: milepost.retry.
            return retrying(ctx.store, attempt)
        except LostRace:
            continue
    raise ConcurrentUpdateError(f"work item {item_id} kept changing under this update; try again", item=item_id)

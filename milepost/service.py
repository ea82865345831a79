"""The service layer: load a work item's graph, apply an action, persist,
return pydantic results. The CLI, the MCP server and the flows call only this.

Every state change is one write transaction. It starts by locking the item
(its row on PostgreSQL, the database on SQLite) and ends with a
compare-and-swap of the item's revision (``UPDATE work_items SET revision =
r + 1 WHERE id = :id AND revision = r``); if another writer got there first
the transaction is rolled back and retried on fresh data, so two processes can
never both apply a transition. ``expect_revision`` lets a caller refuse to act
on stale data.
"""

from __future__ import annotations

import os
import socket
import threading
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, TypeVar, cast

from sqlalchemy import Row, Table, delete, func, insert, select, update
from sqlalchemy.exc import DBAPIError
from sqlalchemy.orm import Session

from milepost._orm import DepRow, EventRow, FocusRow, GateRunRow, ItemRow, MilestoneRow, WorkRefRow, utcnow
from milepost.errors import (
    ConcurrentUpdateError,
    InputError,
    InvalidValueError,
    NotFoundError,
    NotOwnerError,
    StaleRevisionError,
    TransitionError,
)
from milepost.gates._crash import crash_point
from milepost.gates.command import GateResult, Outcome, attempt_files, recover_result, run_gate
from milepost.gates.supervisor import host_identity, stop_attempt
from milepost.graph.dag import Change, WorkGraph
from milepost.graph.item import TodoState, check_open, check_structure_editable, make_wait, readiness_view
from milepost.graph.models import (
    MAX_ID,
    GateCommand,
    ItemDefaults,
    Milestone,
    PlanArtifact,
    TodoItem,
    WorkItem,
    WorkRef,
    check_command,
    check_delay,
    check_name,
    check_retries,
    check_text,
    check_timeout,
)
from milepost.graph.plan import Plan, plan_from_item
from milepost.graph.render import display_status
from milepost.graph.status import Action, ItemState, MilestoneStatus, PlanStatus, transition
from milepost.results import (
    ActionResult,
    Claim,
    CompletionResult,
    DoneResult,
    GateRun,
    ItemSummary,
    MilestoneChange,
    MilestoneView,
    NextResult,
)
from milepost.settings import load_settings
from milepost.store import Store
from milepost.workspace import resolve_workspace

__all__ = ["DEFAULT_AGENT", "Service"]

T = TypeVar("T")
DEFAULT_AGENT = "default"
# Under contention the revision CAS loses and the operation re-runs on fresh data.
MAX_CAS_RETRIES = 20
# How long a reclaimer waits for a dead driver's gate processes to die after SIGKILL.
STOP_WAIT_SECONDS = 10.0

# The service speaks SQLAlchemy Core on the ORM's tables: explicit statements, no identity map.
ITEMS = cast(Table, ItemRow.__table__)
MILESTONES = cast(Table, MilestoneRow.__table__)
DEPS = cast(Table, DepRow.__table__)
RUNS = cast(Table, GateRunRow.__table__)
EVENTS = cast(Table, EventRow.__table__)
FOCUS = cast(Table, FocusRow.__table__)
REFS = cast(Table, WorkRefRow.__table__)


@dataclass
class _Loaded:
    """One transaction's view of a work item."""

    row: Row[Any]
    graph: WorkGraph
    pks: dict[str, int]
    revision: int
    after_open: bool = False  # the item it waits for (``after``) is not completed
    current: bool = False  # it is its owner agent's current item
    dirty: bool = False
    events: list[tuple[str | None, str, str | None, str | None, str | None]] = field(default_factory=list)

    @property
    def id(self) -> int:
        return int(self.row.id)


def _owner() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{threading.get_ident()}"


def _lease_info(log_path: Path) -> dict[str, Any]:
    """Where a leased attempt runs, recorded with the claim: a driver that
    reclaims the lease on the same machine (same boot) makes sure the
    attempt's processes are gone and reads how it ended from its files."""
    return {**host_identity(), "pid": os.getpid(), "log": str(log_path)}


def interrupted_result(claim: Claim, started: datetime, reason: str = "interrupted") -> GateResult:
    return GateResult(
        outcome=Outcome.INTERRUPTED,
        reason=reason,
        started_at=started,
        finished_at=datetime.now(UTC),
        log_path=claim.log_path,
    )


def _change(c: Change) -> MilestoneChange:
    return MilestoneChange(
        milestone=c.after.name,
        action=c.action.value,
        from_status=c.before.status.value,
        to_status=c.after.status.value,
        reason=c.reason,
    )


class Service:
    """milepost's operations on one store, acting as one agent."""

    def __init__(
        self, store: Store, agent: str = DEFAULT_AGENT, *, operator: bool = False, lease_ttl: float | None = None
    ) -> None:
        self.store = store
        self.operator = operator
        self.agent = check_name(agent, "agent") if agent != DEFAULT_AGENT else agent
        # How long a gate's claim stays valid without renewal (renewed every quarter of it).
        self.lease_ttl = timedelta(seconds=load_settings().lease_ttl if lease_ttl is None else lease_ttl)
        self._cache: dict[int, _Loaded] = {}
        # A long-lived service (the MCP server) keeps each item's graph between
        # calls and reuses it while the item's revision is unchanged.
        self.keep_cache = False
        # Milestones a drive keeps out of its schedule (retry delays, --until); in memory only.
        self._holds: dict[int, set[str]] = {}

    @classmethod
    def open(
        cls,
        db: str | None = None,
        agent: str | None = None,
        cwd: Path | None = None,
        *,
        operator: bool = False,
        create: bool = False,
    ) -> Service:
        """The store the settings name: ``db`` or ``MILEPOST_DB``, else the
        SQLite file of the nearest ``.milepost/``; acting as ``agent`` or
        ``MILEPOST_AGENT``. ``create`` makes a new store (``milepost init``)."""
        settings = load_settings()
        ws = resolve_workspace(db or settings.db, cwd)
        store = Store.open(ws.url, ws.home, ws.root, create=create)
        try:
            return cls(store, agent or settings.agent or DEFAULT_AGENT, operator=operator, lease_ttl=settings.lease_ttl)
        except BaseException:
            store.close()
            raise

    def close(self) -> None:
        self.store.close()

    # -- loading -----------------------------------------------------------

    def _load(self, s: Session, item_id: int, *, use_cache: bool | None = None) -> _Loaded:
        """The item's row, focus and ``after`` state, read fresh; its milestone
        graph from the cache when caching and the revision is unchanged."""
        use_cache = self.keep_cache if use_cache is None else use_cache
        row = s.execute(select(ITEMS).where(ITEMS.c.id == item_id)).first()
        if row is None:
            raise NotFoundError(f"no work item {item_id}; see `milepost item list`", item=item_id)
        cached = self._cache.get(item_id) if use_cache else None
        if cached is not None and cached.revision == row.revision:
            # Nothing changed the item since: its milestones are as cached (a
            # lease is not part of the graph, and every other write bumps the revision).
            return _Loaded(
                row=row,
                graph=cached.graph,
                pks=cached.pks,
                revision=row.revision,
                after_open=self._after_open(s, row),
                current=s.execute(select(FOCUS.c.item_id).where(FOCUS.c.agent == row.agent)).scalar() == row.id,
            )
        mrows = s.execute(select(MILESTONES).where(MILESTONES.c.item_id == item_id).order_by(MILESTONES.c.seq)).all()
        by_pk = {r.id: r.name for r in mrows}
        deps: dict[int, list[str]] = {}
        for mid, did in s.execute(
            select(DEPS.c.milestone_id, DEPS.c.dep_id)
            .where(DEPS.c.item_id == item_id)
            .order_by(DEPS.c.milestone_id, DEPS.c.position)
        ):
            deps.setdefault(mid, []).append(by_pk[did])
        milestones = [
            Milestone(
                id=r.seq,
                name=r.name,
                deps=deps.get(r.id, []),
                acceptance=r.acceptance,
                gate=[GateCommand.model_validate(g) for g in r.gate],
                status=MilestoneStatus(r.status),
                attempts=r.attempts,
                retries=r.retries,
                timeout=r.timeout,
                review=r.review,
                awaiting_review=r.awaiting_review,
                fix=r.fix,
                retry_delay=r.retry_delay,
                retry_at=r.retry_at,
                reason=r.reason,
                updated_at=r.updated_at,
            )
            for r in mrows
        ]
        graph = WorkGraph(milestones)
        for name in self._holds.get(item_id, ()):
            if name in graph:
                graph.hold(name)
        focus = s.execute(select(FOCUS.c.item_id).where(FOCUS.c.agent == row.agent)).scalar()
        loaded = _Loaded(
            row=row,
            graph=graph,
            pks={r.name: r.id for r in mrows},
            revision=row.revision,
            after_open=self._after_open(s, row),
            current=focus == row.id,
        )
        if use_cache:
            self._cache[item_id] = loaded
        return loaded

    @staticmethod
    def _after_open(s: Session, row: Row[Any]) -> bool:
        """Whether the item this one waits for (``after``) is not completed yet."""
        if row.after_item_id is None:
            return False
        after_state = s.execute(select(ITEMS.c.state).where(ITEMS.c.id == row.after_item_id)).scalar()
        return bool(after_state != ItemState.COMPLETED.value)

    def _item(self, loaded: _Loaded) -> WorkItem:
        r = loaded.row
        item = WorkItem(
            id=r.id,
            agent=r.agent,
            objective=r.objective,
            state=ItemState(r.state),
            plan_status=PlanStatus(r.plan_status),
            revision=loaded.revision,
            todo_list=r.todo_list or [],
            blocked_by=r.blocked_by,
            recheck_at=r.recheck_at,
            waits=[r.wait] if r.wait else [],
            after=r.after_item_id,
            report=r.report,
            cancel_reason=r.cancel_reason,
            current=loaded.current,
            defaults=ItemDefaults.model_validate(r.defaults or {}),
            created_at=r.created_at,
            updated_at=r.updated_at,
            completed_at=r.completed_at,
            milestones=list(loaded.graph),
        )
        view = readiness_view(item, loaded.graph, after_open=loaded.after_open)
        item.readiness, item.readiness_state, item.readiness_reason = view.readiness.value, view.state, view.reason
        return item

    def _check_owner(self, loaded: _Loaded) -> None:
        """An agent changes only its own items; an operator may change any."""
        owner = loaded.row.agent
        if owner != self.agent and not self.operator:
            raise NotOwnerError(
                f"work item {loaded.id} belongs to agent {owner!r}, not {self.agent!r}:"
                f" act as that agent (--agent {owner}) or as an operator (--operator)",
                item=loaded.id,
                owner=owner,
            )

    def _focused(self, s: Session) -> int | None:
        return s.execute(select(FOCUS.c.item_id).where(FOCUS.c.agent == self.agent)).scalar()

    def resolve_item(self, item: int | None) -> int:
        """``item``, or this agent's current item; raises when there is none."""
        return self._resolve(item)

    def _resolve(self, item: int | None) -> int:
        if item is not None:
            if isinstance(item, bool) or not isinstance(item, int) or not 1 <= item <= MAX_ID:
                raise NotFoundError(f"no work item {item!r}: ids are whole numbers from 1 to {MAX_ID}", item=item)
            return item
        with self.store.read() as s:
            focused = self._focused(s)
        if focused is None:
            raise NotFoundError(
                f"agent {self.agent!r} has no current work item; create one with `milepost item create OBJECTIVE`,"
                " pick one with `milepost item pick ID`, or pass --item ID",
                agent=self.agent,
            )
        return focused

    # -- the write path ----------------------------------------------------

    def _mutate(
        self,
        item: int | None,
        fn: Callable[[Session, _Loaded], T],
        expect_revision: int | None = None,
        *,
        cache: bool | None = None,
        check_owner: bool = True,
    ) -> T:
        """Run ``fn`` in a write transaction on fresh data. When ``fn`` marked
        the item dirty, bump its revision with a compare-and-swap and write the
        event log; a lost CAS re-runs everything on fresh data.

        With ``cache`` (the drive loop; every call of a ``keep_cache`` service)
        the graph of the last call is reused when the stored revision is still
        the one it was built at, so a step costs a few row reads instead of a
        reload of every milestone; the item's own row is always read fresh.
        Any failure drops the cache: ``fn`` may have changed the graph in memory."""
        item_id = self._resolve(item)
        cache = self.keep_cache if cache is None else cache
        for _ in range(MAX_CAS_RETRIES):
            try:
                with self.store.write() as s:
                    # Writers of one item take turns: the item's row lock on
                    # PostgreSQL (SQLite's BEGIN IMMEDIATE already serializes),
                    # taken before anything is read, so no step acts on data
                    # another writer is about to change. The revision CAS at
                    # the end stays as the guard.
                    s.execute(select(ITEMS.c.revision).where(ITEMS.c.id == item_id).with_for_update())
                    loaded = self._load(s, item_id, use_cache=cache)
                    loaded.dirty = False
                    loaded.events = []
                    if check_owner:
                        self._check_owner(loaded)
                    _check_revision(loaded, expect_revision)
                    result = fn(s, loaded)
                    if loaded.dirty:
                        self._commit_revision(s, loaded)
                if cache:
                    self._cache[item_id] = loaded
                return result
            except _LostRace:
                self._cache.pop(item_id, None)
                continue
            except BaseException:
                self._cache.pop(item_id, None)
                raise
        raise ConcurrentUpdateError(f"work item {item_id} kept changing under this update; try again", item=item_id)

    def _commit_revision(self, s: Session, loaded: _Loaded) -> None:
        new = loaded.revision + 1
        now = utcnow()
        res = s.execute(
            update(ITEMS)
            .where(ITEMS.c.id == loaded.id, ITEMS.c.revision == loaded.revision)
            .values(revision=new, updated_at=now)
        )
        if res.rowcount != 1:  # type: ignore[attr-defined]
            raise _LostRace
        if loaded.events:
            s.execute(
                insert(EVENTS),
                [
                    {
                        "item_id": loaded.id,
                        "milestone": m,
                        "action": a,
                        "from_status": f,
                        "to_status": t,
                        "reason": r,
                        "agent": self.agent,
                        "revision": new,
                        "at": now,
                    }
                    for m, a, f, t, r in loaded.events
                ],
            )
        loaded.revision = new

    def _persist(self, s: Session, loaded: _Loaded, changes: Iterable[Change]) -> list[MilestoneChange]:
        out = []
        now = utcnow()
        for c in changes:
            s.execute(
                update(MILESTONES)
                .where(MILESTONES.c.id == loaded.pks[c.after.name])
                .values(
                    status=c.after.status.value,
                    attempts=c.after.attempts,
                    reason=c.after.reason,
                    awaiting_review=c.after.awaiting_review,
                    retry_at=c.after.retry_at,
                    updated_at=now,
                )
            )
            loaded.events.append((c.after.name, c.action.value, c.before.status.value, c.after.status.value, c.reason))
            out.append(_change(c))
        loaded.dirty = True
        return out

    # -- work items --------------------------------------------------------

    def create_item(
        self,
        objective: str,
        *,
        plan_status: PlanStatus = PlanStatus.DRAFT,
        defaults: ItemDefaults | None = None,
        milestones: list[Milestone] | None = None,
        after: int | None = None,
    ) -> WorkItem:
        """Create a work item (optionally with its whole validated milestone
        set, as ``plan apply`` does), write its plan.md and focus it for this
        agent. ``after``: the item waits until that one is completed."""
        check_text(objective, "the objective")
        if not objective.strip():
            raise InvalidValueError("objective is empty: describe what the work item should achieve")
        if defaults is not None:
            check_retries(defaults.retries, "the item's defaults")
            check_timeout(defaults.timeout, "the item's defaults")
            check_delay(defaults.retry_delay, "the item's defaults")
            if defaults.fix is not None:
                check_command(defaults.fix, "the item's default fix command")
        milestones = milestones or []
        WorkGraph(milestones)  # validates the whole set before anything is written
        now = utcnow()
        with self.store.write() as s:
            if after is not None and s.execute(select(ITEMS.c.id).where(ITEMS.c.id == after)).first() is None:
                raise NotFoundError(f"--after {after}: no work item {after}; see `milepost item list`", item=after)
            item_id = s.execute(
                insert(ITEMS)
                .values(
                    agent=self.agent,
                    objective=objective.strip(),
                    state=ItemState.OPEN.value,
                    plan_status=plan_status.value,
                    todo_list=[],
                    defaults=(defaults or ItemDefaults()).model_dump(mode="json"),
                    after_item_id=after,
                    revision=1,
                    created_at=now,
                    updated_at=now,
                )
                .returning(ITEMS.c.id)
            ).scalar_one()
            if milestones:
                self._insert_milestones(s, item_id, milestones, now)
            self._write_plan_md(item_id, objective.strip(), milestones)
            s.execute(
                insert(EVENTS).values(
                    item_id=item_id, action="create", reason=objective.strip(), agent=self.agent, revision=1, at=now
                )
            )
            self._set_focus(s, item_id)
        return self.get_item(item_id)

    def _insert_milestones(
        self, s: Session, item_id: int, ms: list[Milestone], now: datetime, known: dict[str, int] | None = None
    ) -> dict[str, int]:
        """Insert milestones and their dep edges; deps may name ``known`` rows."""
        rows: list[dict[str, Any]] = [
            {
                "item_id": item_id,
                "seq": m.id,
                "name": m.name,
                "acceptance": m.acceptance,
                "gate": [g.model_dump(mode="json") for g in m.gate],
                "retries": m.retries,
                "timeout": m.timeout,
                "review": m.review,
                "fix": m.fix,
                "retry_delay": m.retry_delay,
                "status": m.status.value,
                "attempts": m.attempts,
                "created_at": now,
                "updated_at": now,
            }
            for m in ms
        ]
        pks: dict[str, int] = dict(known or {})
        # Row by row keeps RETURNING portable; plans are small next to their gates.
        for r in rows:
            pks[r["name"]] = s.execute(insert(MILESTONES).values(**r).returning(MILESTONES.c.id)).scalar_one()
        dep_rows = [
            {"milestone_id": pks[m.name], "dep_id": pks[d], "item_id": item_id, "position": i}
            for m in ms
            for i, d in enumerate(m.deps)
        ]
        if dep_rows:
            s.execute(insert(DEPS), dep_rows)
        return pks

    def _set_focus(self, s: Session, item_id: int | None) -> None:
        if s.execute(select(FOCUS.c.agent).where(FOCUS.c.agent == self.agent)).first() is None:
            s.execute(insert(FOCUS).values(agent=self.agent, item_id=item_id))
        else:
            s.execute(update(FOCUS).where(FOCUS.c.agent == self.agent).values(item_id=item_id))

    # -- the plan artifact -----------------------------------------------------

    def plan_path(self, item_id: int) -> Path:
        path = self.store.evidence_dir("work-items") / str(item_id) / "plan.md"
        if self.store.legacy_layout and not path.exists():
            # Stores made before schema 0004 kept plan.md outside a store-id folder.
            old = self.store.home / "work-items" / str(item_id) / "plan.md"
            if old.exists():
                return old
        return path

    def _write_plan_md(self, item_id: int, objective: str, milestones: list[Milestone]) -> None:
        lines = [f"# {objective}", "", "## Milestones", ""]
        for m in milestones:
            deps = f" (after {', '.join(m.deps)})" if m.deps else ""
            lines.append(f"- **{m.name}**{deps}: {m.acceptance or 'no acceptance text yet'}")
        if not milestones:
            lines.append("- none yet")
        lines += ["", "## Approach", "", "(edit this file: it is the durable plan of the work item)", ""]
        path = self.plan_path(item_id)
        path.parent.mkdir(parents=True, exist_ok=True)
        if not path.exists():  # never overwrite what someone wrote
            path.write_text("\n".join(lines))

    def plan_artifact(self, item_id: int, preview_bytes: int = 1024) -> PlanArtifact:
        """The plan.md as found: available (hash, size, preview), missing or unreadable."""
        import hashlib

        path = self.plan_path(item_id)
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            return PlanArtifact(path=str(path), status="missing")
        except OSError:
            return PlanArtifact(path=str(path), status="unreadable")
        return PlanArtifact(
            path=str(path),
            status="available",
            sha256=hashlib.sha256(data).hexdigest(),
            size=len(data),
            preview=data[:preview_bytes].decode("utf-8", errors="replace"),
            preview_complete=len(data) <= preview_bytes,
        )

    # -- evidence ---------------------------------------------------------------

    def add_ref(
        self, kind: str, ref: str, reason: str = "", *, item: int | None = None, expect_revision: int | None = None
    ) -> WorkRef:
        for value, what in ((kind, "the ref's kind"), (ref, "the ref"), (reason, "the ref's reason")):
            check_text(value, what)
        if not kind.strip() or not ref.strip():
            raise InvalidValueError(
                "a work ref needs a kind and a ref, e.g. `milepost ref add pr https://... --reason`"
            )
        now = utcnow()

        def fn(s: Session, loaded: _Loaded) -> WorkRef:
            check_open(self._item(loaded))
            s.execute(insert(REFS).values(item_id=loaded.id, kind=kind.strip(), ref=ref.strip(), reason=reason, at=now))
            loaded.events.append((None, "ref", None, None, f"{kind}: {ref}"))
            loaded.dirty = True
            return WorkRef(kind=kind.strip(), ref=ref.strip(), reason=reason, at=now)

        return self._mutate(item, fn, expect_revision)

    def _check_item(self, s: Session, item_id: int) -> None:
        if s.execute(select(ITEMS.c.id).where(ITEMS.c.id == item_id)).first() is None:
            raise NotFoundError(f"no work item {item_id}; see `milepost item list`", item=item_id)

    def refs(self, item: int | None = None) -> list[WorkRef]:
        item_id = self._resolve(item)
        with self.store.read() as s:
            self._check_item(s, item_id)
            rows = s.execute(select(REFS).where(REFS.c.item_id == item_id).order_by(REFS.c.id)).all()
        return [WorkRef(kind=r.kind, ref=r.ref, reason=r.reason, at=r.at) for r in rows]

    def get_item(self, item: int | None = None) -> WorkItem:
        item_id = self._resolve(item)
        with self.store.read() as s:
            return self._item(self._load(s, item_id))

    def check_can_drive(self, item: int, expect_revision: int | None = None) -> WorkItem:
        """Refuse (before any Prefect start-up) to drive an item that is not
        open, belongs to another agent, or is no longer at ``expect_revision``."""
        with self.store.read() as s:
            loaded = self._load(s, item)
            self._check_owner(loaded)
            _check_revision(loaded, expect_revision)
            current = self._item(loaded)
        check_open(current)
        return current

    def drivable_items(self) -> list[int]:
        """What a scheduler tick drives: open items with a ready milestone,
        every agent's current item first, then the queued ones, oldest first."""
        items = [i for i in self.list_items("open") if i.readiness_state == "milestone_ready"]
        current = set(self.current_items())
        return [i.id for i in sorted(items, key=lambda i: (i.id not in current, i.id))]

    def current_items(self) -> list[int]:
        """Every agent's current item."""
        with self.store.read() as s:
            return [i for i in s.execute(select(FOCUS.c.item_id)).scalars() if i is not None]

    LIST_FILTERS = (
        "all", "open", "completed", "cancelled", "current", "queued", "blocked", "waiting_for_operator", "runnable",
    )  # fmt: skip

    def list_items(self, filter: str = "all", limit: int | None = None) -> list[ItemSummary]:
        """Work items with their readiness. ``current``: this agent's focused
        item; ``queued``: open runnable items that are not current, oldest first."""
        if filter not in self.LIST_FILTERS:
            raise InvalidValueError(f"unknown filter {filter!r}: use one of {', '.join(self.LIST_FILTERS)}")
        with self.store.read() as s:
            focused = self._focused(s)
            ids = s.execute(select(ITEMS.c.id).order_by(ITEMS.c.id)).scalars().all()
            out = []
            for item_id in ids:
                loaded = self._load(s, item_id)
                item = self._item(loaded)
                current = item.id == focused
                if not _matches(filter, item, current):
                    continue
                counts: dict[str, int] = {}
                for m in loaded.graph:
                    v = display_status(loaded.graph, m)
                    counts[v] = counts.get(v, 0) + 1
                out.append(
                    ItemSummary(
                        id=item.id,
                        agent=item.agent,
                        objective=item.objective,
                        state=item.state.value,
                        plan_status=item.plan_status.value,
                        readiness=item.readiness,
                        readiness_state=item.readiness_state,
                        readiness_reason=item.readiness_reason,
                        revision=item.revision,
                        current=current,
                        counts=counts,
                    )
                )
                if limit and len(out) >= limit:
                    break
            return out

    def pick(
        self, item: int, *, clear_blocker: bool = False, reason: str | None = None, expect_revision: int | None = None
    ) -> WorkItem:
        """Make ``item`` this agent's current item. A blocked item is focused
        for inspection without becoming runnable; ``clear_blocker`` (with a
        reason) also clears its blocker and its waits."""
        if reason is not None:
            check_text(reason, "the reason")
        if clear_blocker and not (reason and reason.strip()):
            raise InvalidValueError(f"clearing the blocker of work item {item} needs a reason: pass --reason TEXT")

        def fn(s: Session, loaded: _Loaded) -> None:
            current = self._item(loaded)
            check_open(current)
            if clear_blocker:
                s.execute(
                    update(ITEMS)
                    .where(ITEMS.c.id == loaded.id)
                    .values(blocked_by=None, blocked_by_wait=False, wait=None)
                )
                loaded.events.append((None, "clear_blocker", current.blocked_by, None, reason))
                loaded.dirty = True
            self._set_focus(s, loaded.id)

        self._mutate(item, fn, expect_revision)
        return self.get_item(item)

    def update_item(
        self,
        item: int | None = None,
        *,
        objective: str | None = None,
        plan_status: PlanStatus | None = None,
        todo: list[TodoItem] | None = None,
        blocked_by: str | None = None,
        clear_blocked_by: bool = False,
        recheck_at: datetime | None = None,
        expect_revision: int | None = None,
    ) -> WorkItem:
        """Change a work item; ``todo`` replaces the whole todo list."""
        if recheck_at is not None and recheck_at.tzinfo is None:
            raise InvalidValueError(f"--recheck-at {recheck_at.isoformat()} has no zone: add one, e.g. Z")
        if objective is not None:
            check_text(objective, "the objective")
        if blocked_by is not None:
            check_text(blocked_by, "--blocked-by")
            if clear_blocked_by:
                raise InvalidValueError("--blocked-by and --clear-blocked-by contradict each other: use one")
        for t in todo or []:
            check_text(t.text, "a todo's text")

        def fn(s: Session, loaded: _Loaded) -> None:
            current = self._item(loaded)
            check_open(current)
            values: dict[str, Any] = {}
            if objective is not None:
                if not objective.strip():
                    raise InvalidValueError("objective is empty: describe what the work item should achieve")
                values["objective"] = objective.strip()
                loaded.events.append((None, "objective", None, None, values["objective"]))
            if plan_status is not None and plan_status is not current.plan_status:
                if plan_status is PlanStatus.DRAFT:
                    busy = [m.name for m in loaded.graph if m.status is MilestoneStatus.IN_PROGRESS]
                    if busy:
                        raise TransitionError(
                            f"cannot set work item {loaded.id} back to draft: {', '.join(busy)} in progress;"
                            " finish them first",
                            item=loaded.id,
                        )
                values["plan_status"] = plan_status.value
                loaded.events.append((None, "plan_status", current.plan_status.value, plan_status.value, None))
            if todo is not None:
                values["todo_list"] = [t.model_dump(mode="json") for t in todo]
                loaded.events.append((None, "todo", None, None, f"{len(todo)} entries"))
            if blocked_by is not None:
                if not blocked_by.strip():
                    raise InvalidValueError(
                        "--blocked-by is empty: say what blocks the item, or use --clear-blocked-by"
                    )
                values.update(blocked_by=blocked_by.strip(), blocked_by_wait=False)
                loaded.events.append((None, "blocked_by", None, None, blocked_by.strip()))
            elif clear_blocked_by:
                values.update(blocked_by=None, blocked_by_wait=False)
                loaded.events.append((None, "blocked_by", current.blocked_by, None, "cleared"))
            if recheck_at is not None:
                values.update(recheck_at=recheck_at, recheck_consumed_at=None)
                loaded.events.append((None, "recheck_at", None, None, recheck_at.isoformat()))
            if values:
                s.execute(update(ITEMS).where(ITEMS.c.id == loaded.id).values(**values))
                loaded.dirty = True

        self._mutate(item, fn, expect_revision)
        item_id = self._resolve(item)
        return self.get_item(item_id)

    # -- waits -------------------------------------------------------------------

    def wait_item(
        self,
        kind: str,
        reason: str,
        *,
        resource: str | None = None,
        until: datetime | None = None,
        item: int | None = None,
        expect_revision: int | None = None,
    ) -> WorkItem:
        """Record the item's active wait (replacing an earlier one) and the
        blocker it establishes."""
        wait = make_wait(kind, reason, resource, until, utcnow())

        def fn(s: Session, loaded: _Loaded) -> None:
            current = self._item(loaded)
            check_open(current)
            values: dict[str, Any] = {"wait": wait.model_dump(mode="json")}
            # A wait sets the blocker unless an independent one is recorded already.
            if not current.blocked_by or loaded.row.blocked_by_wait:
                values.update(blocked_by=f"{wait.kind}: {wait.reason}", blocked_by_wait=True)
            s.execute(update(ITEMS).where(ITEMS.c.id == loaded.id).values(**values))
            loaded.events.append((None, "wait", None, wait.kind, f"{wait.resource or ''} {wait.reason}".strip()))
            loaded.dirty = True

        self._mutate(item, fn, expect_revision)
        item_id = self._resolve(item)
        return self.get_item(item_id)

    def _settle(self, item_id: int, why: str) -> None:
        """Clear an item's wait, and the blocker that wait established."""

        def fn(s: Session, loaded: _Loaded) -> None:
            if loaded.row.wait is None:
                return
            values: dict[str, Any] = {"wait": None}
            if loaded.row.blocked_by_wait:
                values.update(blocked_by=None, blocked_by_wait=False)
            s.execute(update(ITEMS).where(ITEMS.c.id == loaded.id).values(**values))
            loaded.events.append((None, "wake", loaded.row.wait.get("kind"), None, why))
            loaded.dirty = True

        self._mutate(item_id, fn, check_owner=False)

    def wake(self, resource: str) -> list[int]:
        """An external event (a PR updated, CI finished): settle every open
        item's wait on ``resource``. Returns the items woken (none is harmless)."""
        if not resource.strip():
            raise InvalidValueError("--resource is empty: name the task or outside object that changed")
        with self.store.read() as s:
            rows = s.execute(
                select(ITEMS.c.id, ITEMS.c.wait).where(ITEMS.c.state == ItemState.OPEN.value, ITEMS.c.wait.is_not(None))
            ).all()
        woken = [r.id for r in rows if r.wait and r.wait.get("resource") == resource]
        for item_id in woken:
            self._settle(item_id, f"wake {resource}")
        return woken

    def expire(self, now: datetime | None = None) -> list[str]:
        """The scheduler's clock: timer waits past their deadline are settled,
        and a due ``recheck_at`` lifts the item's blocker once (consumed) so it
        is reconsidered. Returns what happened, one line each."""
        now = now or utcnow()
        notes: list[str] = []
        with self.store.read() as s:
            rows = s.execute(
                select(ITEMS.c.id, ITEMS.c.wait, ITEMS.c.recheck_at, ITEMS.c.recheck_consumed_at).where(
                    ITEMS.c.state == ItemState.OPEN.value
                )
            ).all()
        for r in rows:
            w = r.wait
            if w and w.get("kind") == "timer" and w.get("deadline"):
                deadline = datetime.fromisoformat(w["deadline"])
                if deadline <= now:
                    self._settle(r.id, f"timer {deadline.isoformat()} expired")
                    notes.append(f"work item {r.id}: timer expired")
            if r.recheck_at is not None and r.recheck_consumed_at is None and r.recheck_at <= now:

                def fn(s: Session, loaded: _Loaded) -> None:
                    s.execute(
                        update(ITEMS)
                        .where(ITEMS.c.id == loaded.id)
                        .values(blocked_by=None, blocked_by_wait=False, recheck_consumed_at=now)
                    )
                    loaded.events.append((None, "recheck", loaded.row.blocked_by, None, "recheck_at is due"))
                    loaded.dirty = True

                self._mutate(r.id, fn, check_owner=False)
                notes.append(f"work item {r.id}: recheck due, blocker lifted")
        return notes

    # -- completion --------------------------------------------------------------

    def complete(self, report: str, *, item: int | None = None, expect_revision: int | None = None) -> CompletionResult:
        """Close an item with its report: refused while a milestone is not
        done or the report is empty; clears focus and waits; warns about
        unfinished todos. Completing a completed item changes nothing."""

        check_text(report, "the completion report")

        def fn(s: Session, loaded: _Loaded) -> CompletionResult:
            current = self._item(loaded)
            if current.state is ItemState.COMPLETED:
                return CompletionResult(
                    item=current, already=True, message=f"work item {loaded.id} is already completed"
                )
            check_open(current)
            if not report.strip():
                raise InvalidValueError(f"work item {loaded.id}: the completion report is empty; say what was achieved")
            undone = [m for m in loaded.graph if not m.status.is_done]
            if undone:
                listed = ", ".join(f"{m.name} ({display_status(loaded.graph, m)})" for m in undone)
                raise TransitionError(
                    f"cannot complete work item {loaded.id}: milestones not done: {listed}",
                    item=loaded.id,
                    not_done=[m.name for m in undone],
                )
            now = utcnow()
            s.execute(
                update(ITEMS)
                .where(ITEMS.c.id == loaded.id)
                .values(
                    state=ItemState.COMPLETED.value,
                    report=report.strip(),
                    completed_at=now,
                    wait=None,
                    blocked_by=None,
                    blocked_by_wait=False,
                )
            )
            s.execute(update(FOCUS).where(FOCUS.c.item_id == loaded.id).values(item_id=None))
            loaded.events.append((None, "complete", ItemState.OPEN.value, ItemState.COMPLETED.value, None))
            loaded.dirty = True
            todos = [t.text for t in current.todo_list if t.state != TodoState.COMPLETED.value]
            warnings = [f"unfinished todo: {t}" for t in todos]
            return CompletionResult(
                item=current, already=False, message=f"completed work item {loaded.id}", warnings=warnings
            )

        result = self._mutate(item, fn, expect_revision)
        result.item = self.get_item(result.item.id)
        return result

    def cancel(self, reason: str, *, item: int | None = None, expect_revision: int | None = None) -> WorkItem:
        """Abandon an item (Holon has no way to; its users asked for one)."""
        check_text(reason, "the reason")
        if not reason.strip():
            raise InvalidValueError("cancelling needs a reason: pass --reason TEXT")

        def fn(s: Session, loaded: _Loaded) -> int:
            current = self._item(loaded)
            check_open(current)
            busy = [m.name for m in loaded.graph if m.status is MilestoneStatus.IN_PROGRESS and not m.awaiting_review]
            if busy:
                raise TransitionError(
                    f"cannot cancel work item {loaded.id}: {', '.join(busy)} in progress; finish or fix them first"
                )
            s.execute(
                update(ITEMS)
                .where(ITEMS.c.id == loaded.id)
                .values(state=ItemState.CANCELLED.value, cancel_reason=reason.strip(), completed_at=utcnow(), wait=None)
            )
            s.execute(update(FOCUS).where(FOCUS.c.item_id == loaded.id).values(item_id=None))
            loaded.events.append((None, "cancel", ItemState.OPEN.value, ItemState.CANCELLED.value, reason.strip()))
            loaded.dirty = True
            return loaded.id

        item_id = self._mutate(item, fn, expect_revision)
        return self.get_item(item_id)

    # -- plans ---------------------------------------------------------------

    def apply_plan(self, plan: Plan) -> WorkItem:
        """Create a work item from a plan, validated whole before anything is written."""
        milestones = plan.to_milestones()
        defaults = ItemDefaults.model_validate(plan.defaults.model_dump())
        return self.create_item(plan.objective, plan_status=plan.plan_status, defaults=defaults, milestones=milestones)

    def export_plan(self, item: int | None = None) -> dict[str, Any]:
        return plan_from_item(self.get_item(item))

    # -- milestones ----------------------------------------------------------

    def add_milestone(
        self,
        name: str,
        deps: list[str] | None = None,
        *,
        acceptance: str = "",
        gate: str | list[GateCommand] | None = None,
        retries: int | None = None,
        timeout: float | None = None,
        review: bool = False,
        fix: str | None = None,
        retry_delay: float | None = None,
        hypothesis: bool = False,
        item: int | None = None,
        expect_revision: int | None = None,
    ) -> ActionResult:
        commands = [GateCommand(name="gate", run=gate)] if isinstance(gate, str) else list(gate or [])
        if isinstance(gate, str) and not gate.strip():
            raise InvalidValueError(f"empty gate for milestone {name!r}: give a shell command, or no --gate")
        if isinstance(acceptance, str):
            check_text(acceptance, f"the acceptance text of milestone {name!r}")

        def fn(s: Session, loaded: _Loaded) -> ActionResult:
            current = self._item(loaded)
            check_structure_editable(current, f"add milestone {name!r}")
            d = current.defaults
            m = loaded.graph.add(
                name,
                deps or [],
                acceptance=acceptance,
                gate=commands,
                retries=d.retries if retries is None else retries,
                timeout=d.timeout if timeout is None else timeout,
                review=review,
                fix=d.fix if fix is None else fix,
                retry_delay=d.retry_delay if retry_delay is None else retry_delay,
                hypothesis=hypothesis,
            )
            loaded.pks = self._insert_milestones(s, loaded.id, [m], utcnow(), loaded.pks)
            loaded.events.append((name, "add", None, m.status.value, None))
            loaded.dirty = True
            return ActionResult(item=loaded.id, revision=loaded.revision + 1, milestone=m)

        return self._mutate(item, fn, expect_revision)

    def remove_milestone(
        self, name: str, *, item: int | None = None, expect_revision: int | None = None
    ) -> ActionResult:
        def fn(s: Session, loaded: _Loaded) -> ActionResult:
            check_structure_editable(self._item(loaded), f"remove milestone {name!r}")
            m = loaded.graph.remove(name)
            s.execute(delete(MILESTONES).where(MILESTONES.c.id == loaded.pks[name]))
            loaded.events.append((name, "remove", m.status.value, None, None))
            loaded.dirty = True
            return ActionResult(item=loaded.id, revision=loaded.revision + 1, milestone=m)

        return self._mutate(item, fn, expect_revision)

    def act(
        self,
        name: str,
        action: Action,
        *,
        reason: str | None = None,
        item: int | None = None,
        expect_revision: int | None = None,
    ) -> ActionResult:
        """Apply one user action (start, needs_fix, reset, lock, unlock, confirm)."""
        if action is Action.DONE:
            raise InputError("use Service.done() for done: it runs the gate")
        if reason is not None:
            check_text(reason, "the reason")

        def fn(s: Session, loaded: _Loaded) -> ActionResult:
            check_open(self._item(loaded))
            try:
                changes = loaded.graph.apply(name, action, reason=reason)
            except TransitionError as e:
                if action is Action.START and name in loaded.graph:
                    raise self._held_by(s, loaded, name, e) from None
                raise
            out = self._persist(s, loaded, changes)
            return ActionResult(item=loaded.id, revision=loaded.revision + 1, milestone=changes[0].after, changes=out)

        return self._mutate(item, fn, expect_revision)

    def _held_by(self, s: Session, loaded: _Loaded, name: str, e: TransitionError) -> TransitionError:
        """A refused ``start`` of a milestone someone already works on says who
        (the agent that started it, when, and the driver running its gate)."""
        m = loaded.graph.get(name)
        if m.status is not MilestoneStatus.IN_PROGRESS:
            return e
        started = s.execute(
            select(EVENTS.c.agent, EVENTS.c.at, EVENTS.c.revision)
            .where(EVENTS.c.item_id == loaded.id, EVENTS.c.milestone == name, EVENTS.c.action == Action.START.value)
            .order_by(EVENTS.c.id.desc())
            .limit(1)
        ).first()
        lease = s.execute(select(MILESTONES.c.lease_owner).where(MILESTONES.c.id == loaded.pks[name])).scalar()
        who = f"agent {started.agent!r} at {started.at:%H:%M:%S} UTC (revision {started.revision})" if started else ""
        gate = f"; its gate is running ({lease})" if lease else ""
        return TransitionError(
            f"cannot start {name!r}: already in progress, started by {who or 'another writer'}{gate};"
            " pick another ready milestone (next), or wait",
            **{**e.details, "held_by": started.agent if started else None, "gate_lease": lease},
        )

    def start(self, name: str, **kw: Any) -> ActionResult:
        return self.act(name, Action.START, **kw)

    # -- claims, gates and their outcomes ---------------------------------------

    def log_path(self, item_id: int, name: str, attempt: int) -> Path:
        return self.store.evidence_dir("logs") / f"item-{item_id}" / name / f"attempt-{attempt}.log"

    def gate_env(self, claim: Claim) -> dict[str, str]:
        """What a gate (and a fix hook) learns about its context."""
        return {
            "MILEPOST_ITEM": str(claim.item),
            "MILEPOST_MILESTONE": claim.milestone.name,
            "MILEPOST_ATTEMPT": str(claim.attempt),
            "MILEPOST_WORKSPACE": str(self.store.root),
        }

    def _take_lease(self, s: Session, loaded: _Loaded, name: str, owner: str) -> Claim:
        """Lease an in-progress milestone's gate to ``owner`` and number its attempt."""
        pk = loaded.pks[name]
        now = utcnow()
        lease = s.execute(
            select(MILESTONES.c.lease_owner, MILESTONES.c.lease_expires).where(MILESTONES.c.id == pk)
        ).one()
        if lease.lease_owner and lease.lease_owner != owner:
            if lease.lease_expires is None or lease.lease_expires <= now:
                raise _ExpiredLease  # its attempt must be fenced and recorded first
            raise TransitionError(
                f"cannot run the gate of {name!r}: it is already running ({lease.lease_owner},"
                f" lease until {lease.lease_expires:%H:%M:%S} UTC); wait for it or let the lease expire",
                milestone=name,
                holder=lease.lease_owner,
            )
        attempt = (s.execute(select(func.max(RUNS.c.attempt)).where(RUNS.c.milestone_id == pk)).scalar() or 0) + 1
        log = self.log_path(loaded.id, name, attempt)
        s.execute(
            update(MILESTONES)
            .where(MILESTONES.c.id == pk)
            .values(lease_owner=owner, lease_expires=now + self.lease_ttl, lease_info=_lease_info(log))
        )
        m = loaded.graph.get(name)
        return Claim(item=loaded.id, pk=pk, milestone=m, attempt=attempt, owner=owner, log_path=str(log))

    def done(
        self,
        name: str,
        *,
        verdict: str | None = None,
        item: int | None = None,
        expect_revision: int | None = None,
    ) -> DoneResult:
        """Finish an in-progress milestone: without a gate it is done; with one,
        the gate runs here (no Prefect), and its outcome decides: pass -> done,
        fail -> needs_fix, or stuck when the retry budget is spent. A milestone
        with a review gate waits for ``approve``/``reject`` after passing."""
        if verdict is not None:
            check_text(verdict, "the verdict")
        owner = _owner()
        item_id = self._resolve(item)

        def claim(s: Session, loaded: _Loaded) -> DoneResult | Claim:
            check_open(self._item(loaded))
            m = loaded.graph.get(name)
            if m.status is not MilestoneStatus.IN_PROGRESS:
                transition(name, m.status, Action.DONE)  # raises with the allowed actions
            if not m.has_gate or m.awaiting_review:
                changes = loaded.graph.apply(name, Action.DONE, reason=verdict)
                out = self._persist(s, loaded, changes)
                return DoneResult(
                    item=loaded.id, revision=loaded.revision + 1, milestone=changes[0].after, passed=True, changes=out
                )
            return self._take_lease(s, loaded, name, owner)

        for _ in range(3):
            recovered = self._reclaim_for_done(item_id, name, owner)
            if recovered is not None and recovered.milestone.status is not MilestoneStatus.IN_PROGRESS:
                # The dead driver's attempt had ended on its own: that was the attempt.
                return recovered
            try:
                claimed = self._mutate(item_id, claim, expect_revision)
                break
            except _ExpiredLease:
                continue  # expired between the check and the claim: fence it, then claim
        else:
            raise ConcurrentUpdateError(f"the lease of {name!r} kept changing hands; try again", milestone=name)
        if isinstance(claimed, DoneResult):
            return claimed
        started = datetime.now(UTC)
        try:
            with self._leases_kept([claimed]):
                result = run_gate(
                    claimed.milestone.gate,
                    Path(claimed.log_path),
                    default_cwd=self.store.root,
                    env=self.gate_env(claimed),
                    default_timeout=claimed.milestone.timeout,
                )
        except KeyboardInterrupt:
            # The gate's process group is already killed: keep the evidence,
            # leave the budget unspent, and let the caller exit 130.
            self.record(claimed, interrupted_result(claimed, started))
            raise
        return self.record(claimed, result, verdict=verdict)

    def _reclaim_for_done(self, item: int, name: str, owner: str) -> DoneResult | None:
        """Before ``done`` runs a gate by hand: a lease left by a driver that
        died (expired) is taken over and its attempt fenced and recorded first,
        so its processes are gone and its attempt number is not reused. The
        milestone stays in progress."""
        now = utcnow()
        with self.store.read() as s:
            row = s.execute(
                select(MILESTONES.c.id, MILESTONES.c.lease_owner, MILESTONES.c.lease_info).where(
                    MILESTONES.c.item_id == item,
                    MILESTONES.c.name == name,
                    MILESTONES.c.status == MilestoneStatus.IN_PROGRESS.value,
                    MILESTONES.c.lease_owner.is_not(None),
                    MILESTONES.c.lease_expires < now,
                )
            ).first()
        if row is None:
            return None
        return self._reclaim(item, row.id, name, row.lease_owner, row.lease_info, owner, now, release=False)

    def claim_next(self, item: int, owner: str, expect_revision: int | None = None) -> Claim | None:
        """The drive loop's claim: the lowest-id ready milestone becomes
        in_progress with a lease for ``owner``, in one transaction. Uses the
        cached graph, so a pick costs O(log n) unless another writer changed
        the item (then it reloads). ``expect_revision`` guards a drive's first
        claim (``drive --expect-revision``)."""

        def fn(s: Session, loaded: _Loaded) -> Claim | None:
            check_open(self._item(loaded))
            m = loaded.graph.next_ready()
            if m is None:
                return None
            changes = loaded.graph.apply(m.name, Action.START)
            self._persist(s, loaded, changes)
            claim = self._take_lease(s, loaded, m.name, owner)
            crash_point("claim")
            return claim

        return self._mutate(item, fn, expect_revision, cache=True)

    def cached_graph(self, item: int) -> WorkGraph:
        """The graph the drive loop works on (loaded on first use)."""
        cached = self._cache.get(item)
        if cached is None:
            with self.store.read() as s:
                cached = self._cache[item] = self._load(s, item)
        return cached.graph

    def hold(self, item: int, name: str) -> None:
        """Keep ``name`` out of :meth:`claim_next` (this process only)."""
        self._holds.setdefault(item, set()).add(name)
        if item in self._cache:
            self._cache[item].graph.hold(name)

    def unhold(self, item: int, name: str) -> None:
        self._holds.get(item, set()).discard(name)
        if item in self._cache:
            self._cache[item].graph.unhold(name)

    def set_holds(self, item: int, names: set[str]) -> None:
        for name in list(self._holds.get(item, set())):
            self.unhold(item, name)
        for name in names:
            self.hold(item, name)

    def renew_leases(self, claims: Iterable[Claim]) -> None:
        claims = list(claims)
        if not claims:
            return
        with self.store.write() as s:
            for c in claims:
                s.execute(
                    update(MILESTONES)
                    .where(MILESTONES.c.id == c.pk, MILESTONES.c.lease_owner == c.owner)
                    .values(lease_expires=utcnow() + self.lease_ttl)
                )

    @contextmanager
    def _leases_kept(self, claims: list[Claim]) -> Iterator[None]:
        """Renew ``claims``' leases in a thread while the block runs."""
        stop = threading.Event()
        keeper = threading.Thread(target=self.keep_leases, args=(lambda: claims, stop), daemon=True)
        keeper.start()
        try:
            yield
        finally:
            stop.set()
            keeper.join()

    def keep_leases(self, claims: Callable[[], Iterable[Claim]], stop: threading.Event) -> None:
        """Renew the leases of ``claims()`` every quarter of their lifetime
        until ``stop`` is set (run it in a thread while gates run)."""
        while not stop.wait(self.lease_ttl.total_seconds() / 4):
            try:
                self.renew_leases(claims())
            except DBAPIError:
                continue  # a missed renewal is retried; the lease has slack for three

    @staticmethod
    def _drop_lease(s: Session, c: Claim) -> None:
        s.execute(
            update(MILESTONES)
            .where(MILESTONES.c.id == c.pk, MILESTONES.c.lease_owner == c.owner)
            .values(lease_owner=None, lease_expires=None, lease_info=None)
        )

    def reclaim_expired(self, item: int, owner: str) -> list[DoneResult]:
        """Milestones whose gate lease expired (their driver died, or froze):
        take the lease over for ``owner`` (one reclaimer wins), make sure the
        previous attempt's processes are gone when they ran on this machine
        (kill their process groups and wait), then record the attempt. When it
        had ended on its own, its files beside the log tell how, and that
        outcome counts (a gate that passed is not run again); otherwise it is
        ``interrupted``: no budget spent, the milestone is ready again. When
        the attempt ran on another machine, lease expiry is the only fence:
        that machine's gate supervisor killed the gate when its driver died."""
        now = utcnow()
        with self.store.read() as s:
            rows = s.execute(
                select(MILESTONES.c.id, MILESTONES.c.name, MILESTONES.c.lease_owner, MILESTONES.c.lease_info).where(
                    MILESTONES.c.item_id == item,
                    MILESTONES.c.status == MilestoneStatus.IN_PROGRESS.value,
                    MILESTONES.c.lease_owner.is_not(None),
                    MILESTONES.c.lease_expires < now,
                )
            ).all()
        out = []
        for pk, name, old_owner, info in rows:
            done = self._reclaim(item, pk, name, old_owner, info, owner, now, release=True)
            if done is not None:
                out.append(done)
        return out

    def _reclaim(
        self,
        item: int,
        pk: int,
        name: str,
        old_owner: str,
        info: dict[str, Any] | None,
        owner: str,
        now: datetime,
        *,
        release: bool,
    ) -> DoneResult | None:
        """Take over one expired lease, fence its attempt, record it (see
        :meth:`reclaim_expired`). None when another driver got there first."""
        until = utcnow() + self.lease_ttl
        with self.store.write() as s:
            taken = s.execute(
                update(MILESTONES)
                .where(
                    MILESTONES.c.id == pk,
                    MILESTONES.c.lease_owner == old_owner,
                    MILESTONES.c.lease_expires < now,
                    MILESTONES.c.status == MilestoneStatus.IN_PROGRESS.value,
                )
                .values(lease_owner=owner, lease_expires=until)
            )
            if taken.rowcount != 1:  # type: ignore[attr-defined]
                return None
            attempt = (s.execute(select(func.max(RUNS.c.attempt)).where(RUNS.c.milestone_id == pk)).scalar() or 0) + 1
        crash_point("reclaim")
        info = info or {}
        log = Path(info["log"]) if info.get("log") else self.log_path(item, name, attempt)
        claim = Claim(
            item=item, pk=pk, milestone=self.cached_graph(item).get(name), attempt=attempt, owner=owner,
            log_path=str(log),
        )  # fmt: skip
        me = host_identity()
        here = bool(info.get("boot")) and info.get("boot") == me["boot"] and info.get("host") == me["host"]
        result = interrupted_result(claim, now, reason=f"lease of {old_owner} expired: its driver stopped")
        if here:
            with self._leases_kept([claim]):
                killed = stop_attempt(attempt_files(log)[0], timeout=STOP_WAIT_SECONDS)
            if killed:
                groups = ", ".join(map(str, killed))
                result = interrupted_result(
                    claim, now, reason=f"lease of {old_owner} expired; killed its process group(s) {groups}"
                )
            else:
                recovered = recover_result(claim.milestone.gate, log, now)
                if recovered.outcome is not Outcome.INTERRUPTED:
                    why = f"{recovered.reason} (ended after its driver stopped; recovered from {log.name})"
                    result = recovered.model_copy(update={"reason": why})
            result = result.model_copy(update={"host": me["host"]})
        elif info.get("host"):
            result = interrupted_result(
                claim, now, reason=f"lease of {old_owner} expired: its driver on {info['host']} stopped"
            ).model_copy(update={"host": info["host"]})
        # Cached graphs of this process may predate the takeover: record on fresh data.
        self._cache.pop(item, None)
        return self.record(claim, result, release=release)

    def record(self, c: Claim, result: GateResult, *, verdict: str | None = None, release: bool = False) -> DoneResult:
        """Store a gate run (always: evidence is never dropped), free the lease
        and apply the outcome while the milestone is still in progress: pass ->
        done (or in review), fail -> needs_fix (ready again after the retry
        delay) or stuck. An interrupted run spends no budget; with ``release``
        the milestone becomes ready again (the drive loop), without it stays
        in progress (``done`` interrupted by hand).

        Only the lease's holder records: when another driver took the lease
        over (this one was frozen or cut off from the database long enough for
        it to expire), that driver records this attempt, and here nothing is
        written (the note says so)."""

        def fn(s: Session, loaded: _Loaded) -> DoneResult:
            holder = s.execute(select(MILESTONES.c.lease_owner).where(MILESTONES.c.id == c.pk)).scalar()
            m = loaded.graph.get(c.milestone.name)
            if holder != c.owner:
                return DoneResult(
                    item=loaded.id,
                    revision=loaded.revision,
                    milestone=m,
                    passed=result.passed,
                    note=f"the lease of {m.name!r} passed to {holder or 'another driver'} while its gate ran"
                    f" (attempt {c.attempt}); that driver records the attempt, this outcome is not applied",
                )
            if not c.milestone.has_gate:
                return self._finish_without_gate(s, loaded, c, result, verdict)
            stored = self.store.relative(Path(result.log_path)) if result.log_path else None
            run = GateRun(
                **result.model_dump(), item=loaded.id, milestone=c.milestone.name, attempt=c.attempt, verdict=verdict
            )
            s.execute(
                insert(RUNS).values(
                    item_id=loaded.id,
                    milestone_id=c.pk,
                    attempt=c.attempt,
                    outcome=result.outcome.value,
                    exit_code=result.exit_code,
                    duration=result.duration,
                    reason=result.reason,
                    tail=result.tail,
                    log_path=stored,
                    host=result.host,
                    commands=[r.model_dump(mode="json") for r in result.commands],
                    verdict=verdict,
                    started_at=result.started_at,
                    finished_at=result.finished_at,
                )
            )
            self._drop_lease(s, c)
            # Every gate run is evidence of the work item.
            s.execute(
                insert(REFS).values(
                    item_id=loaded.id,
                    kind="gate_run",
                    ref=stored or "",
                    reason=f"{c.milestone.name} attempt {c.attempt}: {result.outcome.value} ({result.reason})",
                    at=result.finished_at,
                )
            )
            loaded.dirty = True
            base = {"item": loaded.id, "revision": loaded.revision + 1, "gate_run": run}
            if m.status is not MilestoneStatus.IN_PROGRESS or m.awaiting_review:
                loaded.events.append((m.name, "gate_run", m.status.value, m.status.value, result.reason))
                return DoneResult(
                    **base,
                    milestone=m,
                    passed=result.passed,
                    note=f"{m.name!r} became {m.status.value} while its gate ran: the run is kept as evidence only",
                )
            if result.outcome is Outcome.INTERRUPTED:
                if not release:
                    loaded.events.append((m.name, "interrupted", m.status.value, m.status.value, result.reason))
                    return DoneResult(**base, milestone=m, passed=False)
                changes = loaded.graph.apply(m.name, Action.RELEASE, reason=f"interrupted: {result.reason}")
                out = self._persist(s, loaded, changes)
                return DoneResult(**base, milestone=changes[0].after, passed=False, changes=out)
            retry_at = None
            delay = m.retry_delay
            if not result.passed and delay and m.attempts + 1 < m.max_attempts:
                # Exponential backoff: delay, 2 x delay, 4 x delay, ...
                retry_at = result.finished_at + timedelta(seconds=delay * 2**m.attempts)
            change = loaded.graph.record_attempt(
                m.name, result.passed, None if result.passed else result.reason, retry_at=retry_at
            )
            out = self._persist(s, loaded, [change])
            crash_point("record")
            return DoneResult(**base, milestone=change.after, passed=result.passed, changes=out)

        return self._mutate(c.item, fn, cache=True)

    def _finish_without_gate(
        self, s: Session, loaded: _Loaded, c: Claim, result: GateResult, verdict: str | None
    ) -> DoneResult:
        """A milestone without a gate is done when the drive reaches it (or
        waits for review): no gate run is stored, no attempt is spent."""
        self._drop_lease(s, c)
        m = loaded.graph.get(c.milestone.name)
        loaded.dirty = True
        base = {"item": loaded.id, "revision": loaded.revision + 1}
        if m.status is not MilestoneStatus.IN_PROGRESS or m.awaiting_review:
            return DoneResult(**base, milestone=m, passed=False, note=f"{m.name!r} is {m.status.value}")
        action = Action.RELEASE if result.outcome is Outcome.INTERRUPTED else Action.DONE
        changes = loaded.graph.apply(m.name, action, reason=verdict)
        out = self._persist(s, loaded, changes)
        return DoneResult(**base, milestone=changes[0].after, passed=action is Action.DONE, changes=out)

    def review(
        self,
        name: str,
        approve: bool,
        *,
        reason: str | None = None,
        item: int | None = None,
        expect_revision: int | None = None,
    ) -> ActionResult:
        """``approve``/``reject``: an operator's verdict on a milestone in review."""
        if reason is not None:
            check_text(reason, "the reason")

        def fn(s: Session, loaded: _Loaded) -> ActionResult:
            check_open(self._item(loaded))
            change = loaded.graph.review(name, approve, reason)
            out = self._persist(s, loaded, [change])
            return ActionResult(item=loaded.id, revision=loaded.revision + 1, milestone=change.after, changes=out)

        return self._mutate(item, fn, expect_revision)

    def record_fix(self, claim: Claim, result: GateResult) -> None:
        """Keep a fix hook's run as evidence of the work item (a work ref)."""
        with self.store.write() as s:
            s.execute(
                insert(REFS).values(
                    item_id=claim.item,
                    kind="fix",
                    ref=self.store.relative(Path(result.log_path)) if result.log_path else "",
                    reason=f"fix for {claim.milestone.name} after attempt {claim.attempt}: {result.reason}",
                    at=result.finished_at,
                )
            )

    # -- reading -------------------------------------------------------------

    def plan_order(self, item: int | None = None, until: str | None = None) -> list[str]:
        """``drive --dry-run``: the order a sequential drive would run the
        milestones in if every gate passed. Nothing is written."""
        _, g = self.graph(item)
        sim = WorkGraph(list(g))
        if until is not None:
            keep = {until, *sim.ancestors(until)}
            for other in list(sim):
                if other.name not in keep:
                    sim.hold(other.name)
        order = []
        while (nxt := sim.next_ready()) is not None:
            order.append(nxt.name)
            sim.apply(nxt.name, Action.START)
            sim.record_attempt(nxt.name, passed=True)
            if sim.get(nxt.name).awaiting_review:
                sim.review(nxt.name, approve=True)
        return order

    def next(self, item: int | None = None) -> NextResult:
        item_id = self._resolve(item)
        with self.store.read() as s:
            g = self._load(s, item_id).graph
        pick = g.pick()
        return NextResult(item=item_id, milestone=pick.milestone, reason=pick.reason, ready=[m.name for m in g.ready()])

    def graph(self, item: int | None = None) -> tuple[WorkItem, WorkGraph]:
        item_id = self._resolve(item)
        with self.store.read() as s:
            loaded = self._load(s, item_id)
            return self._item(loaded), loaded.graph

    def milestone_views(self, item: int | None = None) -> tuple[WorkItem, list[MilestoneView]]:
        item_id = self._resolve(item)
        with self.store.read() as s:
            loaded = self._load(s, item_id)
            last = {
                mid: reason
                for mid, reason in s.execute(
                    select(RUNS.c.milestone_id, RUNS.c.reason)
                    .where(RUNS.c.item_id == item_id)
                    .order_by(RUNS.c.milestone_id, RUNS.c.attempt)
                )
            }
            g = loaded.graph
            views = [
                MilestoneView(
                    **m.model_dump(),
                    view=display_status(g, m),
                    waiting_on=[d.name for d in g.undone_deps(m.name)],
                    last_run=last.get(loaded.pks[m.name]),
                )
                for m in g
            ]
            return self._item(loaded), views

    def runs(self, name: str, item: int | None = None) -> list[GateRun]:
        item_id = self._resolve(item)
        with self.store.read() as s:
            loaded = self._load(s, item_id)
            loaded.graph.get(name)
            rows = s.execute(select(RUNS).where(RUNS.c.milestone_id == loaded.pks[name]).order_by(RUNS.c.attempt)).all()
        return [
            GateRun(
                item=item_id,
                milestone=name,
                attempt=r.attempt,
                outcome=Outcome(r.outcome),
                exit_code=r.exit_code,
                duration=r.duration,
                reason=r.reason,
                tail=r.tail,
                log_path=str(self.store.resolve(r.log_path)) if r.log_path else None,
                host=r.host,
                commands=r.commands,
                verdict=r.verdict,
                started_at=r.started_at,
                finished_at=r.finished_at,
            )
            for r in rows
        ]

    def run(self, name: str, attempt: int | None = None, item: int | None = None) -> GateRun:
        """One gate run of a milestone: the last by default."""
        runs = self.runs(name, item)
        if not runs:
            raise NotFoundError(f"milestone {name!r} has no gate runs yet", milestone=name)
        if attempt is None:
            return runs[-1]
        for r in runs:
            if r.attempt == attempt:
                return r
        raise NotFoundError(
            f"milestone {name!r} has no attempt {attempt};"
            f" attempts recorded: {', '.join(str(r.attempt) for r in runs)}",
            milestone=name,
        )

    def events(self, item: int | None = None) -> list[dict[str, Any]]:
        item_id = self._resolve(item)
        with self.store.read() as s:
            self._check_item(s, item_id)
            rows = s.execute(select(EVENTS).where(EVENTS.c.item_id == item_id).order_by(EVENTS.c.id)).all()
        return [dict(r._mapping) for r in rows]


def _matches(filter: str, item: WorkItem, current: bool) -> bool:
    open_ = item.state is ItemState.OPEN
    return {
        "all": True,
        "open": open_,
        "completed": item.state is ItemState.COMPLETED,
        "cancelled": item.state is ItemState.CANCELLED,
        "current": current,
        "queued": open_ and not current and item.readiness == "runnable",
        "blocked": open_ and item.readiness == "blocked",
        "waiting_for_operator": open_ and item.readiness == "waiting_for_operator",
        "runnable": open_ and item.readiness == "runnable",
    }[filter]


class _ExpiredLease(Exception):
    """A claim found another owner's expired lease: reclaim it first."""


class _LostRace(Exception):
    """The revision CAS found another writer first: re-run on fresh data."""


def _check_revision(loaded: _Loaded, expect_revision: int | None) -> None:
    if expect_revision is not None and loaded.revision != expect_revision:
        raise StaleRevisionError(
            f"work item {loaded.id} is at revision {loaded.revision}, not {expect_revision}:"
            " someone changed it since you read it; read it again and retry",
            item=loaded.id,
            expected=expect_revision,
            actual=loaded.revision,
        )

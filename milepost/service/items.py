"""One work item: create (with its milestones, by batched inserts, and its
plan.md), read (with or without the proof check), the checks before a drive,
focus (pick), update, complete, cancel. Functions of a
:class:`~milepost.service._tx.Context`; each change of an existing item is one
:func:`write` (creating one is a transaction of its own). Listing many items
and the event log are in :mod:`.lists`; work refs and the plan.md artifact in
:mod:`.evidence`; finding the item to act on in :mod:`._find`."""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Any

from sqlalchemy import Connection, Row, insert, select, update

from milepost._schema import utcnow
from milepost.errors import InvalidValueError, NotFoundError, TransitionError
from milepost.graph.dag import WorkGraph, display_status
from milepost.graph.item import readiness_view
from milepost.graph.models import (
    DoerSettings,
    ItemDefaults,
    Milestone,
    TodoItem,
    WorkItem,
    check_command,
    check_delay,
    check_retries,
    check_text,
    check_timeout,
)
from milepost.graph.status import (
    ItemState,
    MilestoneStatus,
    PlanStatus,
    TodoState,
)
from milepost.graph.words import count
from milepost.results import CompletionResult
from milepost.retry import retried
from milepost.service import _rows as rows
from milepost.service._find import focused, head, resolve
from milepost.service._rows import EVENTS, FOCUS, ITEMS
from milepost.service._tx import Context, GraphCache, ItemEvent, Loaded, Tx, check_revision, load_graph, write
from milepost.service.evidence import write_plan_md

if TYPE_CHECKING:
    from milepost.service.proofs import Check

__all__ = [
    "cancel",
    "check_can_drive",
    "complete",
    "create_item",
    "get_item",
    "head",
    "pick",
    "read",
    "resolve",
    "update_item",
]

# -- reading --------------------------------------------------------------------


def graph_of(conn: Connection, row: Row[Any], cache: GraphCache | None) -> Loaded:
    """The item's whole graph: cached at this revision, or read (and cached)."""
    loaded = cache.get(row.id, row.revision) if cache is not None else None
    if loaded is None:
        loaded = load_graph(conn, row.id, cache.holds.get(row.id, ()) if cache is not None else ())
        loaded.revision = row.revision
        if cache is not None:
            cache.graphs[row.id] = loaded
    return loaded


def work_item(conn: Connection, row: Row[Any], graph: WorkGraph) -> WorkItem:
    """The whole item with its derived readiness."""
    after_open = False
    if row.after_item_id is not None:
        after_state = conn.execute(select(ITEMS.c.state).where(ITEMS.c.id == row.after_item_id)).scalar()
        after_open = after_state != ItemState.COMPLETED.value
    current = focused(conn, row.agent) == row.id
    item = rows.item(row, list(graph), revision=row.revision, current=current)
    view = readiness_view(item, graph, after_open=after_open)
    item.readiness, item.readiness_state, item.readiness_reason = view.readiness, view.state, view.reason
    return item


def read(ctx: Context, item_id: int, *, proofs: bool = False) -> tuple[WorkItem, WorkGraph]:
    """The item (with its derived readiness) and its whole graph; with
    ``proofs`` the inputs are read first, so the stale milestones are marked
    and the readiness knows them (see :mod:`milepost.service.proofs`)."""
    it, g, _ = read_checked(ctx, item_id) if proofs else (*_read(ctx, item_id), None)
    return it, g


@retried
def read_checked(ctx: Context, item_id: int) -> tuple[WorkItem, WorkGraph, Check]:
    """:func:`read` with the inputs looked at, and what they said."""
    from milepost.service import proofs

    with ctx.store.read() as conn:
        row = head(conn, item_id)
        graph = graph_of(conn, row, ctx.cache).graph
        check = proofs.check(ctx, item_id, graph)
        return work_item(conn, row, graph), graph, check


@retried
def _read(ctx: Context, item_id: int) -> tuple[WorkItem, WorkGraph]:
    with ctx.store.read() as conn:
        row = head(conn, item_id)
        graph = graph_of(conn, row, ctx.cache).graph
        return work_item(conn, row, graph), graph


def get_item(ctx: Context, item: int | None = None) -> WorkItem:
    return read(ctx, resolve(ctx, item))[0]


@retried
def check_can_drive(ctx: Context, item_id: int, expect_revision: int | None = None, *, until: str | None = None) -> str:
    """Refuse (before any Prefect start-up) to drive an item that is not
    open, belongs to another agent, or is no longer at ``expect_revision``,
    or up to a milestone (``until``) it does not have. Returns its objective
    (its row read, and ``until``'s: not the item's milestones)."""

    with ctx.store.read() as conn:
        row = head(conn, item_id)
        tx = Tx(ctx, conn, row, None)  # read only: for its checks
        tx.check_owner()
        check_revision(tx.id, tx.revision, expect_revision)
        tx.check_open()
        if until is not None:
            tx.find(until)  # no such milestone: refused, naming those it has
    return str(row.objective)


# -- creating -----------------------------------------------------------------


def create_item(
    ctx: Context,
    objective: str,
    *,
    plan_status: PlanStatus = PlanStatus.DRAFT,
    defaults: ItemDefaults | None = None,
    milestones: list[Milestone] | None = None,
    after: int | None = None,
    validated: bool = False,
    doer: DoerSettings | None = None,
) -> WorkItem:
    """Create a work item (optionally with its whole validated milestone
    set, as ``plan apply`` does), write its plan.md and focus it for this
    agent. ``after``: the item waits until that one is completed.
    ``validated``: the caller validated the milestone set whole already."""
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
    graph = WorkGraph(milestones, validate=not validated)  # the whole set is valid before anything is written
    now = utcnow()
    with ctx.store.write() as conn:
        if after is not None and conn.execute(select(ITEMS.c.id).where(ITEMS.c.id == after)).first() is None:
            raise NotFoundError(f"--after {after}: no work item {after}; see `milepost item list`", item=after)
        item_id = conn.execute(
            insert(ITEMS)
            .values(
                agent=ctx.agent,
                objective=objective.strip(),
                state=ItemState.OPEN.value,
                plan_status=plan_status.value,
                todo_list=[],
                defaults=(defaults or ItemDefaults()).model_dump(mode="json"),
                doer=None if doer is None or doer.is_default else doer.model_dump(mode="json"),
                after_item_id=after,
                revision=1,
                created_at=now,
                updated_at=now,
            )
            .returning(ITEMS.c.id)
        ).scalar_one()
        if milestones:
            insert_milestones(conn, item_id, milestones, now)
        write_plan_md(ctx, item_id, objective.strip(), milestones)
        conn.execute(
            insert(EVENTS).values(
                item_id=item_id,
                action=ItemEvent.CREATE.value,
                reason=objective.strip(),
                agent=ctx.agent,
                revision=1,
                at=now,
            )
        )
        set_focus(conn, ctx.agent, item_id)
        # The item as stored, from what was just written, not read back and
        # validated again; __dict__ skips pydantic's __setattr__ (no validator
        # runs on it). Both for a large plan's sake: docs/benchmarks.md.
        for m in milestones:
            m.__dict__["updated_at"] = now
        return work_item(conn, head(conn, item_id), graph)


def insert_milestones(
    conn: Connection, item_id: int, ms: list[Milestone], now: datetime, known: dict[str, int] | None = None
) -> dict[str, int]:
    """Insert milestones and their dep edges; deps may name ``known`` rows.
    Returns the rows' keys by name (``known`` included)."""
    pks: dict[str, int] = dict(known or {})
    if ms:
        # One executemany of prepared rows, then the new keys by the ids just
        # written: through SQLAlchemy's batched INSERT ... RETURNING, 100,000
        # milestones took most of `plan apply`.
        same = {"item_id": item_id, "created_at": now, "updated_at": now}
        rows.ADD_MILESTONES.run_many(conn, rows.MILESTONE_ROW_FIELDS, map(rows.milestone_row, ms), same)
        seqs = [m.id for m in ms]
        by_seq = dict(rows.NEW_KEYS.tuples(conn, item=item_id, lo=min(seqs), hi=max(seqs)))
        pks.update((m.name, by_seq[m.id]) for m in ms)
    dep_rows = [(pks[m.name], pks[d], item_id, i) for m in ms for i, d in enumerate(m.deps)]
    if dep_rows:  # in the statement's order, nothing to convert: they go to the driver as they are
        rows.ADD_DEPS.run_many(conn, rows.DEP_FIELDS, dep_rows)
    return pks


def set_focus(conn: Connection, agent: str, item_id: int | None) -> None:
    if conn.execute(select(FOCUS.c.agent).where(FOCUS.c.agent == agent)).first() is None:
        conn.execute(insert(FOCUS).values(agent=agent, item_id=item_id))
    else:
        conn.execute(update(FOCUS).where(FOCUS.c.agent == agent).values(item_id=item_id))


# -- changing ----------------------------------------------------------------


def pick(
    ctx: Context,
    item: int,
    *,
    clear_blocker: bool = False,
    reason: str | None = None,
    expect_revision: int | None = None,
) -> WorkItem:
    """Make ``item`` this agent's current item. A blocked item is focused
    for inspection without becoming runnable; ``clear_blocker`` (with a
    reason) also clears its blocker and its waits."""
    if reason is not None:
        check_text(reason, "the reason")
    if clear_blocker and not (reason and reason.strip()):
        raise InvalidValueError(f"clearing the blocker of work item {item} needs a reason: pass --reason TEXT")

    def fn(tx: Tx) -> None:
        tx.check_open()
        if clear_blocker:
            tx.conn.execute(
                update(ITEMS).where(ITEMS.c.id == tx.id).values(blocked_by=None, blocked_by_wait=False, wait=None)
            )
            tx.emit(ItemEvent.CLEAR_BLOCKER, before=tx.row.blocked_by, reason=reason)
        set_focus(tx.conn, ctx.agent, tx.id)

    write(ctx, resolve(ctx, item), fn, expect_revision)
    return get_item(ctx, item)


def update_item(
    ctx: Context,
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
    _check_update(objective, todo, blocked_by, clear_blocked_by, recheck_at)
    item_id = resolve(ctx, item)

    def fn(tx: Tx) -> None:
        tx.check_open()
        values: dict[str, Any] = {}
        if objective is not None:
            _set_objective(tx, values, objective)
        if plan_status is not None and plan_status is not tx.plan_status:
            _set_plan_status(tx, values, plan_status)
        if todo is not None:
            values["todo_list"] = [t.model_dump(mode="json") for t in todo]
            tx.emit(ItemEvent.TODO, reason=count(len(todo), "entry", "entries"))
        _set_blocker(tx, values, blocked_by, clear_blocked_by)
        if recheck_at is not None:
            values.update(recheck_at=recheck_at, recheck_consumed_at=None)
            tx.emit(ItemEvent.RECHECK_AT, reason=recheck_at.isoformat())
        if values:
            tx.conn.execute(update(ITEMS).where(ITEMS.c.id == tx.id).values(**values))

    write(ctx, item_id, fn, expect_revision)
    return get_item(ctx, item_id)


def _check_update(
    objective: str | None,
    todo: list[TodoItem] | None,
    blocked_by: str | None,
    clear_blocked_by: bool,
    recheck_at: datetime | None,
) -> None:
    """An update's values checked before the store is touched."""
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


def _set_objective(tx: Tx, values: dict[str, Any], objective: str) -> None:
    """A new objective (refused empty), and its event."""
    if not objective.strip():
        raise InvalidValueError("objective is empty: describe what the work item should achieve")
    values["objective"] = objective.strip()
    tx.emit(ItemEvent.OBJECTIVE, reason=values["objective"])


def _set_plan_status(tx: Tx, values: dict[str, Any], plan_status: PlanStatus) -> None:
    """A new plan status (back to draft refused while a milestone is in progress), and its event."""
    if plan_status is PlanStatus.DRAFT:
        busy = tx.in_progress()
        if busy:
            raise TransitionError(
                f"cannot set work item {tx.id} back to draft: {', '.join(busy)} in progress; finish them first",
                item=tx.id,
            )
    values["plan_status"] = plan_status.value
    tx.emit(ItemEvent.PLAN_STATUS, before=tx.plan_status.value, after=plan_status.value)


def _set_blocker(tx: Tx, values: dict[str, Any], blocked_by: str | None, clear: bool) -> None:
    """What blocks the item set (refused empty) or cleared, and its event."""
    if blocked_by is not None:
        if not blocked_by.strip():
            raise InvalidValueError("--blocked-by is empty: say what blocks the item, or use --clear-blocked-by")
        values.update(blocked_by=blocked_by.strip(), blocked_by_wait=False)
        tx.emit(ItemEvent.BLOCKED_BY, reason=blocked_by.strip())
    elif clear:
        values.update(blocked_by=None, blocked_by_wait=False)
        tx.emit(ItemEvent.BLOCKED_BY, before=tx.row.blocked_by, reason="cleared")


def complete(
    ctx: Context, report: str, *, item: int | None = None, expect_revision: int | None = None
) -> CompletionResult:
    """Close an item with its report: refused while a milestone is not
    done, or is stale (done, but its inputs changed since: not proven on the
    code as it is), or the report is empty; clears focus and waits; warns
    about unfinished todos. Completing a completed item changes nothing."""
    from milepost.service import proofs

    check_text(report, "the completion report")
    item_id = resolve(ctx, item)
    _, g = read(ctx, item_id)
    # The files are read before the write transaction (it would hold the store's lock meanwhile).
    stale = proofs.check(ctx, item_id, g).stale

    def fn(tx: Tx) -> tuple[bool, str, list[str]]:
        if tx.state is ItemState.COMPLETED:
            return True, f"work item {tx.id} is already completed", []
        tx.check_open()
        if not report.strip():
            raise InvalidValueError(f"work item {tx.id}: the completion report is empty; say what was achieved")
        g = tx.graph().graph
        undone = [m for m in g if m.status is not MilestoneStatus.DONE]
        if undone:
            listed = ", ".join(f"{m.name} ({display_status(g, m)})" for m in undone)
            raise TransitionError(
                f"cannot complete work item {tx.id}: milestones not done: {listed}",
                item=tx.id,
                not_done=[m.name for m in undone],
            )
        if stale:
            listed = "; ".join(f"{name} ({info.reason})" for name, info in stale.items())
            raise TransitionError(
                f"cannot complete work item {tx.id}: milestones stale (done, but not proven on the code as it is):"
                f" {listed}; re-prove them with `milepost verify`",
                item=tx.id,
                stale=list(stale),
            )
        tx.conn.execute(
            update(ITEMS)
            .where(ITEMS.c.id == tx.id)
            .values(
                state=ItemState.COMPLETED.value,
                report=report.strip(),
                completed_at=utcnow(),
                wait=None,
                blocked_by=None,
                blocked_by_wait=False,
            )
        )
        tx.conn.execute(update(FOCUS).where(FOCUS.c.item_id == tx.id).values(item_id=None))
        tx.emit(ItemEvent.COMPLETE, before=ItemState.OPEN.value, after=ItemState.COMPLETED.value)
        todos = [TodoItem.model_validate(t) for t in tx.row.todo_list or []]
        warnings = [f"unfinished todo: {t.text}" for t in todos if t.state is not TodoState.COMPLETED]
        return False, f"completed work item {tx.id}", warnings

    already, message, warnings = write(ctx, item_id, fn, expect_revision)
    return CompletionResult(item=get_item(ctx, item_id), already=already, message=message, warnings=warnings)


def cancel(ctx: Context, reason: str, *, item: int | None = None, expect_revision: int | None = None) -> WorkItem:
    """Abandon an item (Holon has no way to; its users asked for one)."""
    check_text(reason, "the reason")
    if not reason.strip():
        raise InvalidValueError("cancelling needs a reason: pass --reason TEXT")

    def fn(tx: Tx) -> None:
        tx.check_open()
        busy = tx.in_progress(in_review=False)
        if busy:
            raise TransitionError(
                f"cannot cancel work item {tx.id}: {', '.join(busy)} in progress; finish or fix them first"
            )
        tx.conn.execute(
            update(ITEMS)
            .where(ITEMS.c.id == tx.id)
            .values(state=ItemState.CANCELLED.value, cancel_reason=reason.strip(), completed_at=utcnow(), wait=None)
        )
        tx.conn.execute(update(FOCUS).where(FOCUS.c.item_id == tx.id).values(item_id=None))
        tx.emit(ItemEvent.CANCEL, before=ItemState.OPEN.value, after=ItemState.CANCELLED.value, reason=reason.strip())

    item_id = resolve(ctx, item)
    write(ctx, item_id, fn, expect_revision)
    return get_item(ctx, item_id)

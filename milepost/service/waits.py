"""Waits: an item's active wait (and the blocker it sets), external events
that wake items, and the scheduler's clock (timer deadlines, ``recheck_at``)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import select, update

from milepost._schema import utcnow
from milepost.errors import InvalidValueError
from milepost.graph.item import make_wait
from milepost.graph.models import Wait, WorkItem
from milepost.graph.status import ItemState, WaitKind
from milepost.retry import retried
from milepost.service._rows import ITEMS
from milepost.service._tx import Context, ItemEvent, Tx, write
from milepost.service.items import get_item, resolve

__all__ = ["expire", "wait_item", "wake"]


def wait_item(
    ctx: Context,
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
    item_id = resolve(ctx, item)

    def fn(tx: Tx) -> None:
        tx.check_open()
        values: dict[str, Any] = {"wait": wait.model_dump(mode="json")}
        # A wait sets the blocker unless an independent one is recorded already.
        if not tx.row.blocked_by or tx.row.blocked_by_wait:
            values.update(blocked_by=f"{wait.kind.value}: {wait.reason}", blocked_by_wait=True)
        tx.conn.execute(update(ITEMS).where(ITEMS.c.id == tx.id).values(**values))
        tx.emit(ItemEvent.WAIT, after=wait.kind.value, reason=f"{wait.resource or ''} {wait.reason}".strip())

    write(ctx, item_id, fn, expect_revision)
    return get_item(ctx, item_id)


def _settle(ctx: Context, item_id: int, why: str) -> None:
    """Clear an item's wait, and the blocker that wait established."""

    def fn(tx: Tx) -> None:
        if tx.row.wait is None:
            return
        values: dict[str, Any] = {"wait": None}
        if tx.row.blocked_by_wait:
            values.update(blocked_by=None, blocked_by_wait=False)
        tx.conn.execute(update(ITEMS).where(ITEMS.c.id == tx.id).values(**values))
        tx.emit(ItemEvent.WAKE, before=Wait.model_validate(tx.row.wait).kind.value, reason=why)

    write(ctx, item_id, fn, check_owner=False)


@retried
def _open_waits(ctx: Context) -> list[tuple[int, Wait]]:
    with ctx.store.read() as conn:
        found = conn.execute(
            select(ITEMS.c.id, ITEMS.c.wait).where(ITEMS.c.state == ItemState.OPEN.value, ITEMS.c.wait.is_not(None))
        ).all()
    return [(r.id, Wait.model_validate(r.wait)) for r in found if r.wait]


def wake(ctx: Context, resource: str) -> list[int]:
    """An external event (a PR updated, CI finished): settle every open
    item's wait on ``resource``. Returns the items woken (none is harmless)."""
    if not resource.strip():
        raise InvalidValueError("--resource is empty: name the task or outside object that changed")
    woken = [item_id for item_id, w in _open_waits(ctx) if w.resource == resource]
    for item_id in woken:
        _settle(ctx, item_id, f"wake {resource}")
    return woken


def expire(ctx: Context, now: datetime | None = None) -> list[str]:
    """The scheduler's clock: timer waits past their deadline are settled,
    and a due ``recheck_at`` lifts the item's blocker once (consumed) so it
    is reconsidered. Returns what happened, one line each."""
    now = now or utcnow()
    notes: list[str] = []
    for item_id, w in _open_waits(ctx):
        if w.kind is WaitKind.TIMER and w.deadline is not None and w.deadline <= now:
            _settle(ctx, item_id, f"timer {w.deadline.isoformat()} expired")
            notes.append(f"work item {item_id}: timer expired")
    with ctx.store.read() as conn:
        due = (
            conn.execute(
                select(ITEMS.c.id).where(
                    ITEMS.c.state == ItemState.OPEN.value,
                    ITEMS.c.recheck_at.is_not(None),
                    ITEMS.c.recheck_consumed_at.is_(None),
                    ITEMS.c.recheck_at <= now,
                )
            )
            .scalars()
            .all()
        )

    def recheck(tx: Tx) -> None:
        tx.conn.execute(
            update(ITEMS)
            .where(ITEMS.c.id == tx.id)
            .values(blocked_by=None, blocked_by_wait=False, recheck_consumed_at=now)
        )
        tx.emit(ItemEvent.RECHECK, before=tx.row.blocked_by, reason="recheck_at is due")

    for item_id in due:
        write(ctx, item_id, recheck, check_owner=False)
        notes.append(f"work item {item_id}: recheck due, blocker lifted")
    return notes

"""Reading many work items at once: the list with each item's readiness
and its milestones counted by view, every agent's current item, an item's
event log. (One item is read in :mod:`milepost.service.items`.)"""

from __future__ import annotations

from typing import Any

from sqlalchemy import select

from milepost.errors import InvalidValueError
from milepost.graph.dag import WorkGraph, display_status
from milepost.graph.item import readiness_view
from milepost.graph.models import WorkItem
from milepost.graph.status import ItemFilter, ItemState, Readiness
from milepost.graph.status import ReadinessState as RS
from milepost.results import ItemSummary
from milepost.retry import retried
from milepost.service._find import focused, head, resolve
from milepost.service._rows import EVENTS, FOCUS, ITEMS
from milepost.service._tx import Context
from milepost.service.items import graph_of, work_item

__all__ = ["LIST_FILTERS", "current_items", "events", "list_items"]

LIST_FILTERS = tuple(f.value for f in ItemFilter)


@retried
def list_items(ctx: Context, filter: str = "all", limit: int | None = None) -> list[ItemSummary]:
    """Work items with their readiness. ``current``: this agent's focused
    item; ``queued``: open runnable items that are not current, oldest first."""
    try:
        kept = ItemFilter(filter)
    except ValueError:
        raise InvalidValueError(f"unknown filter {filter!r}: use one of {', '.join(LIST_FILTERS)}") from None
    out = []
    with ctx.store.read() as conn:
        mine = focused(conn, ctx.agent)
        for row in conn.execute(select(ITEMS).order_by(ITEMS.c.id)).all():
            graph = graph_of(conn, row, ctx.cache).graph
            item = _proven(ctx, work_item(conn, row, graph), graph)
            current = item.id == mine
            if not _matches(kept, item, current):
                continue
            counts: dict[Any, int] = {}
            for m in graph:
                v = display_status(graph, m)
                counts[v] = counts.get(v, 0) + 1
            out.append(
                ItemSummary.model_validate(
                    {**item.model_dump(exclude={"milestones", "current"}), "current": current, "counts": counts}
                )
            )
            if limit and len(out) >= limit:
                break
    return out


def _proven(ctx: Context, item: WorkItem, graph: WorkGraph) -> WorkItem:
    """An item whose milestones are all done awaits its report only when none
    is stale: its proofs are checked (only then: one pass over its inputs), and
    a stale one makes it runnable again, to re-prove (as ``item show`` says)."""
    if item.readiness_state is not RS.AWAITING_REPORT:
        return item
    from milepost.service import proofs

    proofs.check(ctx, item.id, graph)  # (marks the graph's stale milestones)
    view = readiness_view(item, graph)
    return item.model_copy(
        update={"readiness": view.readiness, "readiness_state": view.state, "readiness_reason": view.reason}
    )


def _matches(kept: ItemFilter, item: WorkItem, current: bool) -> bool:
    F = ItemFilter
    open_ = item.state is ItemState.OPEN
    return {
        F.ALL: True,
        F.OPEN: open_,
        F.COMPLETED: item.state is ItemState.COMPLETED,
        F.CANCELLED: item.state is ItemState.CANCELLED,
        F.CURRENT: current,
        F.QUEUED: open_ and not current and item.readiness is Readiness.RUNNABLE,
        F.BLOCKED: open_ and item.readiness is Readiness.BLOCKED,
        F.WAITING_FOR_OPERATOR: open_ and item.readiness is Readiness.WAITING_FOR_OPERATOR,
        F.RUNNABLE: open_ and item.readiness is Readiness.RUNNABLE,
    }[kept]


@retried
def current_items(ctx: Context) -> list[int]:
    """Every agent's current item."""
    with ctx.store.read() as conn:
        return [i for i in conn.execute(select(FOCUS.c.item_id)).scalars() if i is not None]


@retried
def events(ctx: Context, item: int | None = None) -> list[dict[str, Any]]:
    item_id = resolve(ctx, item)
    with ctx.store.read() as conn:
        head(conn, item_id)
        found = conn.execute(select(EVENTS).where(EVENTS.c.item_id == item_id).order_by(EVENTS.c.id)).all()
    return [dict(r._mapping) for r in found]

"""Finding a work item: the acting agent's current one, or the one named,
and its row. Below both :mod:`.items` and :mod:`.evidence` (which write
each other's files), so neither imports the other to find an item."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol, TypeVar

from sqlalchemy import Connection, Row, select

from milepost.errors import NotFoundError
from milepost.graph.models import MAX_ID
from milepost.retry import retried
from milepost.service._rows import FOCUS, ITEMS, MILESTONES
from milepost.service._tx import Context, unknown_milestone

__all__ = ["focused", "head", "milestone_pk", "of_attempt", "resolve"]


class _Attempted(Protocol):
    @property
    def attempt(self) -> int: ...


A = TypeVar("A", bound=_Attempted)


def of_attempt(found: Sequence[A], attempt: int | None) -> A | None:
    """The record of ``attempt`` among ``found`` (in attempt order), the last when None; None when there is none."""
    if attempt is None:
        return found[-1] if found else None
    return next((f for f in found if f.attempt == attempt), None)


def focused(conn: Connection, agent: str) -> int | None:
    return conn.execute(select(FOCUS.c.item_id).where(FOCUS.c.agent == agent)).scalar()


@retried
def resolve(ctx: Context, item: int | None) -> int:
    """``item``, or the acting agent's current item; raises when there is none."""
    if item is not None:
        if isinstance(item, bool) or not isinstance(item, int) or not 1 <= item <= MAX_ID:
            raise NotFoundError(f"no work item {item!r}: ids are whole numbers from 1 to {MAX_ID}", item=item)
        return item
    with ctx.store.read() as conn:
        current = focused(conn, ctx.agent)
    if current is None:
        raise NotFoundError(
            f"agent {ctx.agent!r} has no current work item; create one with `milepost item create OBJECTIVE`,"
            " pick one with `milepost item pick ID`, or pass --item N",
            agent=ctx.agent,
        )
    return current


def head(conn: Connection, item_id: int) -> Row[Any]:
    row = conn.execute(select(ITEMS).where(ITEMS.c.id == item_id)).first()
    if row is None:
        raise NotFoundError(f"no work item {item_id}; see `milepost item list`", item=item_id)
    return row


def milestone_pk(conn: Connection, item_id: int, name: str) -> int:
    """The key of the item's milestone ``name`` (the item read with :func:`head`
    first), or :class:`NotFoundError` naming the milestones there are."""
    head(conn, item_id)
    pk = conn.execute(
        select(MILESTONES.c.id).where(MILESTONES.c.item_id == item_id, MILESTONES.c.name == name)
    ).scalar()
    if pk is None:
        raise unknown_milestone(conn, item_id, name)
    return int(pk)

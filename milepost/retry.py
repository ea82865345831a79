"""Riding out a lost database connection.

A PostgreSQL restart, a failover or a network blip drops the connections a
process holds; the next statement fails with a disconnect and the store
reports :class:`~milepost.errors.DatabaseUnreachableError`. An operation run
through :func:`retrying` is tried again, on a fresh connection, with a
growing pause (0.25 s, 0.5 s, 1 s, 2 s, then every 4 s) until
``MILEPOST_DB_RETRY`` seconds in all have passed; then the error stands and
the command exits 3 naming the database.

Only a lost connection is retried: a refusal, a damaged store or a SQLite
lock (which waited its busy timeout already) is not. Whatever is retried must
be safe to run twice: every write here is one transaction, so a retry after a
failure re-runs it whole on fresh data, and the writes whose commit may have
reached the database before its connection dropped check for themselves (a
recorded attempt is never recorded twice: ``claims.record``).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, TypeVar

from milepost.errors import DatabaseUnreachableError

if TYPE_CHECKING:
    from milepost.store import Store

__all__ = ["backoff", "retrying"]

T = TypeVar("T")
FIRST_PAUSE = 0.25
LONGEST_PAUSE = 4.0


def backoff(tried: int) -> float:
    """The pause before retry number ``tried`` (1, 2, ...)."""
    return float(min(LONGEST_PAUSE, FIRST_PAUSE * 2 ** (tried - 1)))


def retrying(store: Store, fn: Callable[[], T]) -> T:
    """``fn()``, tried again while the database is unreachable, for at most
    ``store.retry_for`` seconds in all (``MILEPOST_DB_RETRY``)."""
    deadline: float | None = None
    tried = 0
    while True:
        try:
            return fn()
        except DatabaseUnreachableError:
            now = time.monotonic()
            if deadline is None:
                deadline = now + store.retry_for
            tried += 1
            pause = min(backoff(tried), deadline - now)
            if pause <= 0:
                raise
            time.sleep(pause)

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

Reads are retried as well (:func:`retried` on the service's readers): a
drive, a doer's session or the MCP server outlives many connections, and a
restart may land on any of its reads, its first included. Retries nest
without multiplying: inside an operation already run through
:func:`retrying`, an inner one runs once and the outer one retries the whole.
"""

from __future__ import annotations

import functools
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Concatenate, ParamSpec, Protocol, TypeVar

from milepost.errors import DatabaseUnreachableError

if TYPE_CHECKING:
    from milepost.store import Store

__all__ = ["backoff", "retried", "retrying"]

T = TypeVar("T")
P = ParamSpec("P")
FIRST_PAUSE = 0.25
LONGEST_PAUSE = 4.0


def backoff(tried: int) -> float:
    """The pause before retry number ``tried`` (1, 2, ...)."""
    return float(min(LONGEST_PAUSE, FIRST_PAUSE * 2 ** (tried - 1)))


class _Depth(threading.local):
    """How many :func:`retrying` calls this thread is inside."""

    n = 0


_DEPTH = _Depth()


class HasStore(Protocol):
    """What :func:`retried` needs of a reader's first argument (a service Context)."""

    @property
    def store(self) -> Store: ...


C = TypeVar("C", bound=HasStore)


def retrying(store: Store, fn: Callable[[], T]) -> T:
    """``fn()``, tried again while the database is unreachable, for at most
    ``store.retry_for`` seconds in all (``MILEPOST_DB_RETRY``). Inside
    another ``retrying`` on this thread, ``fn()`` runs once: the outer one
    retries."""
    if _DEPTH.n:
        return fn()
    _DEPTH.n += 1
    try:
        return _retry(store, fn)
    finally:
        _DEPTH.n -= 1


def retried(fn: Callable[Concatenate[C, P], T]) -> Callable[Concatenate[C, P], T]:
    """A reader of the store (its first argument a Context) run through :func:`retrying`."""

    @functools.wraps(fn)
    def run(ctx: C, /, *args: P.args, **kwargs: P.kwargs) -> T:
        return retrying(ctx.store, lambda: fn(ctx, *args, **kwargs))

    return run


def _retry(store: Store, fn: Callable[[], T]) -> T:
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

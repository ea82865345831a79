"""Riding out a lost database connection: reads are retried like writes, and
retries nest without multiplying (milepost.retry). The pure rules on a stand-in
store; then a real PostgreSQL server stopped under an open service, whose
readers wait for it to come back instead of ending the process."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pytest

from milepost.errors import DatabaseUnreachableError
from milepost.retry import retried, retrying
from milepost.service import Service
from tests.conftest import PgCluster


class _Store:
    retry_for = 1.0


class _Ctx:
    store: Any = _Store()


def _failing(times: int, calls: list[int]) -> Any:
    def fn() -> str:
        calls.append(1)
        if len(calls) <= times:
            raise DatabaseUnreachableError("cannot reach database x: gone")
        return "read"

    return fn


def test_a_lost_connection_is_retried_until_it_answers() -> None:
    calls: list[int] = []
    assert retrying(_Store(), _failing(2, calls)) == "read"  # type: ignore[arg-type]
    assert len(calls) == 3


def test_retries_stop_at_the_bound_and_the_error_stands() -> None:
    calls: list[int] = []
    t0 = time.monotonic()
    with pytest.raises(DatabaseUnreachableError):
        retrying(_Store(), _failing(1000, calls))  # type: ignore[arg-type]
    assert 0.9 <= time.monotonic() - t0 < 3  # retry_for = 1 s: 0.25 + 0.5 + the rest
    assert 3 <= len(calls) <= 5


def test_a_retried_reader_inside_a_retried_operation_runs_once_per_outer_try() -> None:
    inner_calls: list[int] = []
    outer_calls: list[int] = []

    @retried
    def reader(ctx: _Ctx) -> str:
        inner_calls.append(1)
        if len(inner_calls) == 1:
            raise DatabaseUnreachableError("cannot reach database x: gone")
        return "read"

    def operation() -> str:
        outer_calls.append(1)
        return reader(_Ctx())

    assert retrying(_Store(), operation) == "read"  # type: ignore[arg-type]
    # The inner failure went to the outer retry, which re-ran the whole operation.
    assert len(inner_calls) == 2 and len(outer_calls) == 2


def test_nesting_is_per_thread() -> None:
    """A thread started inside a retried operation retries its own reads."""
    calls: list[int] = []
    got: list[str] = []

    def operation() -> None:
        t = threading.Thread(target=lambda: got.append(retrying(_Store(), _failing(1, calls))))  # type: ignore[arg-type]
        t.start()
        t.join()

    retrying(_Store(), operation)  # type: ignore[arg-type]
    assert got == ["read"] and len(calls) == 2


# -- a real server stopped under an open service ---------------------------------------


@pytest.mark.postgres
def test_readers_wait_for_a_stopped_server_to_come_back(cluster: PgCluster, tmp_path: Path) -> None:
    from milepost.store import Store

    url = cluster.server.create_db("mp_retry_reads")
    (tmp_path / ".milepost").mkdir()
    svc = Service(Store.open(url, tmp_path / ".milepost", tmp_path, create=True))
    try:
        item = svc.create_item("reads survive a restart").id
        svc.add_milestone("a", gate="true", item=item)
        assert [m.name for m in svc.graph(item)[1]] == ["a"]  # the pool holds a connection now
        cluster.stop()
        back = threading.Timer(1.5, cluster.start)
        back.start()
        t0 = time.monotonic()
        try:
            # Every connection is gone and the server refuses new ones for 1.5 s.
            assert [m.name for m in svc.graph(item)[1]] == ["a"]
            waited = time.monotonic() - t0
            assert svc.next(item).milestone is not None
            assert [i.id for i in svc.list_items()] == [item]
            assert svc.check_can_drive(item) == "reads survive a restart"
        finally:
            back.join()
        assert waited >= 1.0  # it did wait for the server, not read from a cache
    finally:
        svc.close()

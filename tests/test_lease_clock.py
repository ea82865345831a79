"""Leases go by the service's clock (``Service(clock=...)``): a test moves
it past another driver's lease instead of sleeping the lease out."""

from __future__ import annotations

import sqlite3
from datetime import timedelta
from pathlib import Path

import pytest
from sqlalchemy import update

from milepost._schema import MILESTONES
from milepost.errors import TransitionError
from milepost.service import Service
from tests.conftest import MovableClock


def test_another_drivers_lease_expires_when_the_services_clock_passes_it(clock: MovableClock, service: Service) -> None:
    assert service.ctx.clock is clock  # every service made in the test goes by it
    item = service.create_item("clock").id
    service.add_milestone("a", gate="true", item=item)
    service.start("a", item=item)
    with service.store.write() as conn:  # a lease of 60 s held by a driver on another machine
        conn.execute(
            update(MILESTONES)
            .where(MILESTONES.c.name == "a")
            .values(
                lease_owner="other:1", lease_expires=clock() + timedelta(seconds=60), lease_info={"host": "elsewhere"}
            )
        )
    with pytest.raises(TransitionError, match="already running"):
        service.done("a", item=item)
    clock.advance(61)  # no sleep: the lease is past for this service
    r = service.done("a", item=item)
    assert r.passed and r.milestone.status.value == "done", r
    assert [run.outcome.value for run in service.runs("a", item=item)] == ["interrupted", "passed"]


def _take_over(service: Service, name: str, owner: str) -> None:
    """Another driver takes the lease over (as takeover.py's compare-and-swap would)."""
    with service.store.write() as conn:
        conn.execute(update(MILESTONES).where(MILESTONES.c.name == name).values(lease_owner=owner))


def test_a_claims_lease_is_confirmed_before_its_gate_starts(clock: MovableClock, service: Service) -> None:
    """LeaseKeeper.confirm, asked right before a gate or doer starts: the
    store says whether the lease is still the drive's, at once after the
    claim too, and a lease another driver took over (this drive stalled past
    its expiry) says no."""
    item = service.create_item("confirm").id
    service.add_milestone("a", gate="true", item=item)
    session = service.drive_session(item, "me:1")
    claim = session.claim_next()
    assert claim is not None and claim.leased_until is not None
    session.leases.add(claim)  # (as the loop does from the claim on)
    assert claim.leased_until == pytest.approx(clock() + service.ctx.lease_ttl, abs=timedelta(seconds=5))
    assert session.leases.confirm(claim)
    _take_over(service, "a", "other:2")
    assert not session.leases.confirm(claim)  # at once after the claim: the store, not this process's clock, says
    clock.advance(service.ctx.lease_ttl.total_seconds() * 0.3)
    assert not session.leases.confirm(claim)
    _take_over(service, "a", "me:1")
    assert session.leases.confirm(claim)  # still its own, and renewed for a lifetime
    with service.store.read() as conn:
        expires = conn.execute(MILESTONES.select().where(MILESTONES.c.name == "a")).one().lease_expires
    assert expires.replace(tzinfo=None) >= (clock() + service.ctx.lease_ttl * 0.9).replace(tzinfo=None)
    _take_over(service, "a", "other:2")
    assert not session.leases.confirm(claim)  # a renewal it just wrote is no answer either


def test_a_store_out_of_reach_confirms_a_lease_only_until_it_expires(
    clock: MovableClock, workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The store cannot say (here: locked by another writer past the busy
    timeout): the claim is the drive's until its lease as known here ends,
    and not after."""
    from milepost.store import Store
    from milepost.workspace import init_workspace

    monkeypatch.setenv("MILEPOST_BUSY_TIMEOUT", "0.1")
    monkeypatch.setenv("MILEPOST_DB_RETRY", "0.1")
    ws = init_workspace(workspace)
    service = Service(Store.open(ws.url, ws.home, ws.root, create=True))
    try:
        item = service.create_item("unreachable").id
        service.add_milestone("a", gate="true", item=item)
        session = service.drive_session(item, "me:1")
        claim = session.claim_next()
        assert claim is not None
        session.leases.add(claim)
        blocker = sqlite3.connect(ws.home / "milepost.db", timeout=0)
        try:
            blocker.execute("BEGIN IMMEDIATE")  # another writer holds the database
            assert session.leases.confirm(claim)
            clock.advance(service.ctx.lease_ttl.total_seconds() + 1)
            assert not session.leases.confirm(claim)
        finally:
            blocker.rollback()
            blocker.close()
    finally:
        service.close()

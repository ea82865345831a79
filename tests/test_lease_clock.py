"""Leases go by the service's clock (``Service(clock=...)``): a test moves
it past another driver's lease instead of sleeping the lease out."""

from __future__ import annotations

from datetime import timedelta

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
    """LeaseKeeper.confirm, asked right before a gate or doer starts: within
    the first quarter of a lease it took, a drive knows the lease is its own
    without asking the store; later it asks, and a lease another driver
    took over (this drive stalled past its expiry) says no."""
    item = service.create_item("confirm").id
    service.add_milestone("a", gate="true", item=item)
    session = service.drive_session(item, "me:1")
    claim = session.claim_next()
    assert claim is not None and claim.leased_until is not None
    session.leases.add(claim)  # (as the loop does from the claim on)
    assert claim.leased_until == pytest.approx(clock() + service.ctx.lease_ttl, abs=timedelta(seconds=5))
    _take_over(service, "a", "other:2")
    assert session.leases.confirm(claim)  # its first quarter: no round trip (nobody takes a live lease over)
    clock.advance(service.ctx.lease_ttl.total_seconds() * 0.3)
    assert not session.leases.confirm(claim)  # past its first quarter: asked the store: taken over
    _take_over(service, "a", "me:1")
    assert session.leases.confirm(claim)  # asked the store: still its own, and renewed for a lifetime
    with service.store.read() as conn:
        expires = conn.execute(MILESTONES.select().where(MILESTONES.c.name == "a")).one().lease_expires
    assert expires.replace(tzinfo=None) >= (clock() + service.ctx.lease_ttl * 0.9).replace(tzinfo=None)
    _take_over(service, "a", "other:2")
    assert session.leases.confirm(claim)  # the renewal it just wrote has a first quarter too
    assert not session.leases.confirm(claim, ask=True)  # unless asked
    clock.advance(service.ctx.lease_ttl.total_seconds() * 0.3)
    assert not session.leases.confirm(claim)

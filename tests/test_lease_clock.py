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

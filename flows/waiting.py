"""A drive with nothing it can run while other live drivers hold its item's
work waits for them instead of ending: it says once what it waits on (again
only when that changes), looks at the store every :data:`WAIT_POLL`
seconds, and goes back to its loop when what the others hold or the item
changed: a milestone their gate unblocked is claimable here, a lease that
expired (its driver died) is reclaimed as at the start. It ends with the
item's verdict, whoever ran the gates. An expired lease, or one whose holder
died on this machine, is not waited on (see :func:`milepost.service.leases.held_by_others`).
"""

from __future__ import annotations

import time
from typing import Protocol

from milepost.events import Reporter
from milepost.service.drive import DriveSession

__all__ = ["WAIT_POLL", "wait_for_others"]

# Seconds between two looks at the store while waiting (one read of the item's leases and revision).
WAIT_POLL = 0.5


class _Context(Protocol):
    @property
    def fault(self) -> object: ...

    @property
    def wait_for_others(self) -> bool: ...


class _Loop(Protocol):
    """What of the drive loop (flows/loop.py) the wait uses."""

    session: DriveSession
    reporter: Reporter
    waiting_on: dict[str, str]
    told_busy: set[str]

    @property
    def ctx(self) -> _Context: ...

    def hold_retries(self) -> None: ...

    def check_proofs(self) -> None: ...


def wait_for_others(loop: _Loop) -> bool:
    """Wait while other live drivers hold leases on ``loop``'s milestones (of
    its scope) until what they hold or the item's revision changes: True
    (look again: claim, reclaim, check the proofs). False at once when none
    holds any, when the drive does not wait (``DriveContext.wait_for_others``:
    the scheduler's tick), or when a part was lost meanwhile (the drive ends)."""
    if not loop.ctx.wait_for_others:
        return False
    seen = loop.session.others()
    if not seen.leases:
        loop.waiting_on = {}
        return False
    if seen.leases != loop.waiting_on:
        loop.waiting_on = seen.leases
        loop.reporter.waiting_for_drivers(seen.leases)
    while loop.ctx.fault is None:
        time.sleep(WAIT_POLL)
        now = loop.session.others()
        if now == seen:
            continue
        # A milestone held back because another driver's gate held its lease is claimable once that ended.
        for name in loop.session.free_busy(now.leases):
            loop.told_busy.discard(name)
        loop.hold_retries()  # another driver's failure waits for its retry delay here too
        loop.check_proofs()  # (and one whose inputs did not change since it failed is not retried)
        return True
    return False

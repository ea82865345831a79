"""A drive with nothing it can run while other live drivers hold its item's
work waits for them instead of ending: it says once what it waits on (again
only when that changes), looks at the store every :data:`WAIT_POLL`
seconds, and goes back to its loop when what the others hold or the item
changed: a milestone their gate unblocked is claimable here, a lease that
expired (its driver died) is reclaimed as at the start. It ends with the
item's verdict, whoever ran the gates. An expired lease, or one whose holder
died on this machine, is not waited on (see :func:`milepost.service.takeover.held_by_others`).
A milestone another drive's gate failed, with a fix hook, is left to that
drive while its fix may run (a fix hook holds no lease): this drive waits
for its retry, up to the fix's timeout (else the lease's lifetime) plus the
lease's lifetime, and then takes it up itself (that drive died meanwhile).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Protocol

from milepost.events import Reporter
from milepost.graph.status import MilestoneStatus
from milepost.service.drive import DriveSession

__all__ = ["WAIT_POLL", "Waiting", "wait_for_others"]

# Seconds between two looks at the store while waiting (one read of the item's leases and revision).
WAIT_POLL = 0.5


@dataclass
class Waiting:
    """What a drive's wait keeps between two waits: what it last said it
    waits on, and the milestones left to another drive's fix hook (name ->
    (holder, the monotonic deadline of that wait))."""

    told: dict[str, str] = field(default_factory=dict)
    fixing: dict[str, tuple[str, float]] = field(default_factory=dict)


class _Context(Protocol):
    @property
    def fault(self) -> object: ...

    @property
    def wait_for_others(self) -> bool: ...


class _Loop(Protocol):
    """What of the drive loop (flows/loop.py) the wait uses."""

    session: DriveSession
    reporter: Reporter
    waiting: Waiting
    told_busy: set[str]

    @property
    def ctx(self) -> _Context: ...

    def hold_retries(self) -> None: ...

    def check_proofs(self) -> None: ...


def wait_for_others(loop: _Loop) -> bool:
    """Wait while other live drivers hold leases on ``loop``'s milestones (of
    its scope), or fix one their gate failed, until what they hold or the
    item's revision changes: True (look again: claim, reclaim, check the
    proofs). False at once when none does, when the drive does not wait
    (``DriveContext.wait_for_others``: the scheduler's tick), or when a part
    was lost meanwhile (the drive ends)."""
    if not loop.ctx.wait_for_others:
        return False
    w = loop.waiting
    if _end_fixes(loop):
        return True  # a fix left to another drive is its own again: claim it
    seen = loop.session.others()
    if _free_busy(loop, seen.leases):  # another driver's gate ended before this look: claimable now
        return True
    held = {**seen.leases, **{n: f"{h}, fixing it" for n, (h, _) in w.fixing.items() if n not in seen.leases}}
    if not held:
        w.told = {}
        return False
    if held != w.told:
        w.told = held
        loop.reporter.waiting_for_drivers(held)
    while loop.ctx.fault is None:
        time.sleep(WAIT_POLL)
        now = loop.session.others()
        if now == seen:
            if any(deadline <= time.monotonic() for _, deadline in w.fixing.values()):
                return True
            continue
        # A milestone held back because another driver's gate held its lease is claimable once that ended.
        _free_busy(loop, now.leases)
        _leave_fixes(loop, seen.leases, now.leases)
        loop.hold_retries()  # another driver's failure waits for its retry delay here too
        loop.check_proofs()  # (and one whose inputs did not change since it failed is not retried)
        return True
    return False


def _free_busy(loop: _Loop, held: dict[str, str]) -> list[str]:
    """The milestones held back because another driver's gate held their lease, that ``held`` no longer holds."""
    freed = loop.session.free_busy(held)
    loop.told_busy.difference_update(freed)
    return freed


def _leave_fixes(loop: _Loop, before: dict[str, str], now: dict[str, str]) -> None:
    """A milestone another drive's gate just failed, with a fix hook, is that
    drive's to fix and retry: its fix hook runs without a lease, so this drive
    holds it (it sees the retry's lease when it comes, and waits on that)."""
    g = loop.session.graph
    ttl = loop.session.ctx.lease_ttl.total_seconds()
    for name, holder in before.items():
        if name in now or not holder.startswith("drive:") or name not in g:
            continue
        m = g.get(name)
        if m.status is MilestoneStatus.NEEDS_FIX and m.fix:
            loop.session.hold(name)
            loop.waiting.fixing[name] = (holder, time.monotonic() + (m.timeout or ttl) + ttl)


def _end_fixes(loop: _Loop) -> bool:
    """Milestones left to another drive's fix that moved (its retry came) or
    whose wait is over are this drive's again; True when one may be claimed now."""
    g = loop.session.graph
    claimable = False
    for name, (_, deadline) in list(loop.waiting.fixing.items()):
        m = g.get(name) if name in g else None
        if m is None or m.status is not MilestoneStatus.NEEDS_FIX or deadline <= time.monotonic():
            del loop.waiting.fixing[name]
            loop.session.unhold(name)
            claimable = claimable or (m is not None and m.status is MilestoneStatus.NEEDS_FIX)
    return claimable

"""Taking over a dead driver's lease: whose lease is live, which may be
taken over, taking it, fencing the attempt it covered and recording how
that attempt ended.

A lease records where its holder runs (host, boot id, pid and the pid's
start time, see :func:`~milepost.service.leases.take_lease`). It is live
until it expires, unless its holder is provably gone: it ran on this
machine, in this boot, and its process has died (:func:`holder_gone`, by
the rules of :func:`milepost.gates.liveness.life`). A lease that expired,
or whose holder is gone, is taken over (one taker wins, by compare-and-swap
on its owner) and its attempt **fenced** before anything runs again: when
the attempt ran on this machine, every process group its ``.proc`` file
names is killed and waited for (:func:`fence`); then the attempt's files
tell how it ended (:meth:`~milepost.gates.attempt.AttemptFiles.recover`):
an attempt that ended on its own counts as it ended (a gate that passed is
not run again), any other is ``interrupted`` (no budget spent). When it ran
on another machine, lease expiry is the only fence: that machine's gate
supervisor killed the gate when its driver died.

The taken-over attempt is recorded by the one path that records gate runs
(:func:`milepost.service.claims.record`), under the new owner. An attempt
of a doer milestone (docs/doers.md) counts as merged or not: its merge
commit found on a local branch (its trailers name the item, the milestone
and the attempt), it passed, whatever its files say, and nothing runs again;
its gate passed but nothing merged, it is interrupted (the next attempt
merges the branch's work).
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from sqlalchemy import select, update

from milepost._text import holder as shown_holder
from milepost.errors import NotFoundError
from milepost.gates._crash import crash_point
from milepost.gates.attempt import AttemptFiles
from milepost.gates.command import GateResult, Outcome
from milepost.gates.git import GitError, Repo
from milepost.gates.integration import find_merge
from milepost.gates.liveness import Life, boot_id, group_alive, life, still_ours
from milepost.gates.supervisor import host_identity
from milepost.gates.worktrees import Worktrees, doer_branch
from milepost.graph.models import DoerSettings
from milepost.graph.status import MilestoneStatus
from milepost.results import Claim, DoneResult
from milepost.retry import retrying
from milepost.service import _rows as rows
from milepost.service._rows import ITEMS, MILESTONES
from milepost.service._tx import Context, GraphCache
from milepost.service.claims import interrupted_result, record
from milepost.service.do_evidence import do_run, do_run_of, record_do_run, set_merge_commit
from milepost.service.leases import LeaseKeeper, expired

__all__ = [
    "HeldElsewhere",
    "fence",
    "held_by_others",
    "holder_gone",
    "reclaim_expired",
    "reclaim_for_done",
    "reclaimable",
]

# How long a taker waits for a dead driver's gate processes to die after SIGKILL.
STOP_WAIT_SECONDS = 10.0


# -- whose lease is live ----------------------------------------------------------------


def holder_gone(info: dict[str, Any] | None) -> bool:
    """Whether the lease holder ``info`` describes has died: on this machine,
    in this boot, its pid is free, a zombie, or another process now (another
    start time). Anything else (another machine, another boot, a live or
    merely stopped process, a lease without the facts) proves nothing: then
    only the lease's expiry does."""
    if not info:
        return False
    me = host_identity()
    if not me["boot"] or info.get("boot") != me["boot"] or info.get("host") != me["host"]:
        return False
    pid, start = info.get("pid"), info.get("start")
    if not isinstance(pid, int) or pid <= 0 or pid == os.getpid():
        return False
    return life(pid, start if isinstance(start, int) else None) is Life.GONE


@dataclass(frozen=True)
class HeldElsewhere:
    """What other drivers hold of an item: its revision, and the milestones
    whose lease another owner holds live (milestone -> holder)."""

    revision: int
    leases: dict[str, str] = field(default_factory=dict)


def held_by_others(ctx: Context, item: int, owner: str, scope: set[str] | None = None) -> HeldElsewhere:
    """The live leases on ``item``'s milestones (of ``scope``; None: all)
    held by another owner than ``owner``, read in one transaction with the
    item's revision. An expired lease, or one whose holder died on this
    machine, is not live: a drive takes it over instead of waiting on it."""
    now = ctx.clock()
    query = select(MILESTONES.c.name, MILESTONES.c.lease_owner, MILESTONES.c.lease_expires, MILESTONES.c.lease_info)
    query = query.where(
        MILESTONES.c.item_id == item, MILESTONES.c.lease_owner.is_not(None), MILESTONES.c.lease_owner != owner
    )
    with ctx.store.read() as conn:
        revision = conn.execute(select(ITEMS.c.revision).where(ITEMS.c.id == item)).scalar_one()
        found = conn.execute(query).all()
    held = {
        r.name: str(r.lease_owner)
        for r in found
        if (scope is None or r.name in scope) and not expired(r, now) and not holder_gone(r.lease_info)
    }
    return HeldElsewhere(int(revision), dict(sorted(held.items())))


def reclaimable(ctx: Context, item: int, now: datetime) -> list[tuple[Any, bool]]:
    """The item's leased in-progress milestones that may be taken over now:
    (row, gone) with ``gone`` True for a lease that has not expired but whose
    holder is dead."""
    with ctx.store.read() as conn:
        found = conn.execute(_leased(item)).all()
    out = []
    for r in found:
        if r.lease_expires is None or r.lease_expires < now:
            out.append((r, False))
        elif holder_gone(r.lease_info):
            out.append((r, True))
    return out


def _leased(item: int, name: str | None = None, expired_by: datetime | None = None) -> Any:
    """The leased in-progress milestones of ``item`` (named ``name``; with
    ``expired_by``, whose lease expired before then)."""
    where = [
        MILESTONES.c.item_id == item,
        MILESTONES.c.status == MilestoneStatus.IN_PROGRESS.value,
        MILESTONES.c.lease_owner.is_not(None),
    ]
    if expired_by is not None:
        where.append(MILESTONES.c.lease_expires < expired_by)
    if name is not None:
        where.append(MILESTONES.c.name == name)
    columns = (MILESTONES.c.lease_owner, MILESTONES.c.lease_info, MILESTONES.c.lease_expires)
    return select(MILESTONES.c.id, MILESTONES.c.name, *columns).where(*where)


# -- taking over --------------------------------------------------------------------------


def reclaim_expired(ctx: Context, item: int, owner: str, cache: GraphCache | None = None) -> list[DoneResult]:
    """Every lease of ``item`` that may be taken over (:func:`reclaimable`):
    taken over for ``owner``, its attempt fenced and recorded (see the
    module); the milestones are ready again unless their attempt ended on
    its own. Leases another taker got first are left to it."""
    now = ctx.clock()
    out = []
    for r, gone in retrying(ctx.store, lambda: reclaimable(ctx, item, now)):
        recorded = _take_over(ctx, item, r, owner, now, release=True, cache=cache, gone=gone)
        if recorded is not None:
            out.append(recorded)
    return out


def reclaim_for_done(ctx: Context, item: int, name: str, owner: str, *, gone: bool = False) -> DoneResult | None:
    """Before ``done`` runs a gate by hand: a lease left by a driver that
    died (expired, or with ``gone`` held by a process proven dead on this
    machine) is taken over and its attempt fenced and recorded first, so its
    processes are gone and its attempt number is not reused. The milestone
    stays in progress."""
    now = ctx.clock()
    with ctx.store.read() as conn:
        r = conn.execute(_leased(item, name, None if gone else now)).first()
    if r is None or (gone and not holder_gone(r.lease_info)):
        return None
    return _take_over(ctx, item, r, owner, now, release=False, gone=gone)


def _take_over(
    ctx: Context,
    item: int,
    r: Any,
    owner: str,
    now: datetime,
    *,
    release: bool,
    cache: GraphCache | None = None,
    gone: bool = False,
) -> DoneResult | None:
    """Take over the lease of row ``r`` (expired; with ``gone``, the live
    lease of a holder proven dead), fence its attempt and record it. None
    when another driver got there first."""
    claim = _take_lease(ctx, item, r, owner, now, gone=gone)
    if claim is None:
        return None
    crash_point("reclaim")
    result = _fenced_result(ctx, claim, r.lease_owner, r.lease_info or {}, now, gone=gone)
    merged = _merged(ctx, claim)
    result = _as_merged(claim, result, merged)
    done = record(ctx, claim, result, release=release, cache=cache)
    _killed_doer(ctx, claim, result, merged)
    return done


def _merged(ctx: Context, claim: Claim) -> str | None:
    """The merge commit of the taken-over attempt of a doer milestone, when
    its driver merged it before it died (the merge commit's trailers name
    the item, the milestone and the attempt); None otherwise."""
    if not claim.milestone.has_doer or claim.reproof:
        return None
    repo = Repo.find(ctx.store.root)
    if repo is None:
        return None
    with contextlib.suppress(GitError):
        return find_merge(repo, claim.item, claim.milestone.name, claim.attempt)
    return None


def _as_merged(claim: Claim, result: GateResult, merged: str | None) -> GateResult:
    """How a doer attempt taken over counts: merged, it passed (its gate
    passed, or it would not have been merged: nothing runs again); its gate
    passed but its work was not merged, it is interrupted (the next attempt's
    gate judges the branch's work again, then merges it)."""
    if not claim.milestone.has_doer or claim.reproof:
        return result
    if merged is not None:
        gate = AttemptFiles(Path(claim.log_path)).read_result()
        why = f"passed: merged as {merged[:10]} before its driver stopped ({result.reason})"
        if gate is not None and gate.passed:
            return gate.model_copy(update={"reason": why, "host": result.host})
        return result.model_copy(update={"outcome": Outcome.PASSED, "reason": why})
    if result.outcome is Outcome.PASSED:
        why = "interrupted: its gate passed, its driver stopped before merging its work: the next attempt merges it"
        return result.model_copy(update={"outcome": Outcome.INTERRUPTED, "reason": why})
    return result


def _item_doer(ctx: Context, item: int) -> DoerSettings:
    """The item's ``doer:`` block (its usage form and prices), as its drive reads its doers' reports."""
    doer: object = None
    with contextlib.suppress(Exception), ctx.store.read() as conn:  # (unknown: found by looking, as unnamed)
        doer = conn.execute(select(ITEMS.c.doer).where(ITEMS.c.id == item)).scalar_one_or_none()
    try:
        return DoerSettings.model_validate(doer or {})
    except Exception:  # (a block this version cannot read whole: its usage form still counts when it reads)
        usage = doer.get("usage") if isinstance(doer, dict) else None
        with contextlib.suppress(Exception):
            return DoerSettings.model_validate({"usage": usage} if usage else {})
        return DoerSettings()


def _killed_doer(ctx: Context, claim: Claim, result: GateResult, merged: str | None) -> None:
    """A doer that died with its driver (its log is there, its do run is
    not): its do run recorded interrupted, with how long it ran and what it
    said it cost, which the budgets count. A do run its driver recorded
    before dying stays; a merge found names its merge commit."""
    files = AttemptFiles(Path(claim.log_path)).do
    if not claim.milestone.has_doer or not files.log.exists():
        return
    # (nothing of the doer's own end is known but its time: not its exit or its output)
    ended = {"outcome": Outcome.INTERRUPTED.value, "exit_code": None, "duration": files.ran_for()}
    doer = _item_doer(ctx, claim.item)
    run = do_run_of(
        claim, result, claim.milestone.do_usage or doer.usage, ctx=ctx, prices=doer.prices, host=result.host, **ended
    )
    record_do_run(ctx, claim, run)
    if merged is not None:
        set_merge_commit(ctx, claim, merged)
        _drop_merged(ctx, claim)


def _drop_merged(ctx: Context, claim: Claim) -> None:
    """The merged attempt's worktree and branch removed, as its driver would
    have (its commits stay reachable from the branch it was merged into)."""
    repo = Repo.find(ctx.store.root)
    with contextlib.suppress(GitError, NotFoundError, OSError):
        run = do_run(ctx, claim.milestone.name, claim.attempt, claim.item)
        if repo is not None and run.worktree:
            Worktrees(repo).drop(Path(run.worktree), doer_branch(claim.item, claim.milestone.name))


def _take_lease(ctx: Context, item: int, r: Any, owner: str, now: datetime, *, gone: bool) -> Claim | None:
    """The lease of row ``r`` moved to ``owner`` if it still has the owner
    it was read with (and, unless ``gone``, is still expired), and the
    attempt it covered numbered; None when another driver got there first."""
    until = ctx.clock() + ctx.lease_ttl
    with ctx.store.write() as conn:
        taken = conn.execute(
            update(MILESTONES)
            .where(
                MILESTONES.c.id == r.id,
                MILESTONES.c.lease_owner == r.lease_owner,
                *([] if gone else [MILESTONES.c.lease_expires < now]),
                MILESTONES.c.status == MilestoneStatus.IN_PROGRESS.value,
            )
            .values(lease_owner=owner, lease_expires=until)
        )
        if taken.rowcount != 1:
            return None
        attempt = (conn.execute(rows.LAST_ATTEMPT, {"pk": r.id}).scalar() or 0) + 1
        m = rows.with_deps(rows.MILESTONE_BY_PK.rows(conn, pk=r.id))[0]
    info = r.lease_info or {}
    if info.get("log"):
        log = Path(info["log"])
    else:
        log = AttemptFiles.of(ctx.store.evidence_dir("logs"), item, r.name, attempt).log
    reproof = bool(info.get("reproof"))
    return Claim(
        item=item,
        pk=r.id,
        milestone=m,
        attempt=attempt,
        owner=owner,
        log_path=str(log),
        reproof=reproof,
        leased_until=until,
    )


def _claimed_at(info: dict[str, Any], default: datetime) -> datetime:
    """When the lease's attempt was claimed, as its lease recorded it (older leases: ``default``)."""
    try:
        at = datetime.fromisoformat(str(info["claimed"]))
    except (KeyError, ValueError):
        return default
    return at if at.tzinfo is not None and at <= default else default


def _fenced_result(
    ctx: Context, claim: Claim, old_owner: str, info: dict[str, Any], now: datetime, *, gone: bool
) -> GateResult:
    """How the taken-over attempt ended, once it is fenced (see the module)."""
    me = host_identity()
    here = bool(info.get("boot")) and info.get("boot") == me["boot"] and info.get("host") == me["host"]
    # A lease taken over before it expired: its holder was proven dead here.
    lapse = f"lease of {shown_holder(old_owner)} " + ("freed, its process died" if gone else "expired")
    started = _claimed_at(info, now)  # the attempt ran from its claim, not from now
    result = interrupted_result(claim, started, reason=f"{lapse}: its driver stopped")
    if here:
        files = AttemptFiles(Path(claim.log_path))
        with LeaseKeeper(ctx, [claim]):
            killed = fence(files, timeout=STOP_WAIT_SECONDS) + fence(files.do, timeout=STOP_WAIT_SECONDS)
        if killed:
            groups = ", ".join(map(str, killed))
            result = interrupted_result(claim, started, reason=f"{lapse}; killed its process group(s) {groups}")
        else:
            recovered = files.recover(claim.milestone.gate, started, default_timeout=claim.milestone.timeout)
            if recovered.outcome is not Outcome.INTERRUPTED:
                why = f"{recovered.reason} (ended after its driver stopped; recovered from {files.log.name})"
                result = recovered.model_copy(update={"reason": why})
            else:  # its commands' time until the supervisor stopped them counts as gate time spent
                result = result.model_copy(update={"duration": recovered.duration})
        return result.model_copy(update={"host": me["host"]})
    if info.get("host"):
        reason = f"lease of {shown_holder(old_owner)} expired: its driver stopped"
        return interrupted_result(claim, started, reason=reason).model_copy(update={"host": info["host"]})
    return result


# -- fencing ------------------------------------------------------------------------------


def fence(files: AttemptFiles, timeout: float = STOP_WAIT_SECONDS) -> list[int]:
    """Make sure no process of an attempt started on this machine lives:
    every process group its ``.proc`` file records as started, in this boot,
    whose leader is still the recorded process (or gone, with members left)
    gets SIGKILL, and this waits (up to ``timeout``) until the groups are
    empty. Returns the groups it had to kill."""
    boot = boot_id()
    killed = []
    for rec in files.starts():
        if not isinstance(rec.get("pid"), int) or rec.get("boot") != boot:
            continue  # another boot: nothing of it lives
        pgid = int(rec["pid"])
        if still_ours(pgid, rec.get("start")) and group_alive(pgid):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pgid, signal.SIGKILL)
            killed.append(pgid)
    deadline = time.monotonic() + timeout
    while any(group_alive(g) for g in killed) and time.monotonic() < deadline:
        time.sleep(0.05)
    return killed

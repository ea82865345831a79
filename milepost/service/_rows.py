"""Rows and models: the tables the service writes, and the one mapping
between a row and its pydantic model (``model_validate`` of the row's
mapping one way, ``model_dump(include=...)`` the other).

Statements the hot paths run on every transition are built once, here, with
bind parameters, and compiled once per dialect (see :mod:`._prepared`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from enum import Enum
from typing import Any

from sqlalchemy import Row, bindparam, exists, false, func, insert, select, update

from milepost._schema import DEPS, EVENTS, FOCUS, ITEMS, MANIFESTS, MILESTONES, REFS, RUNS
from milepost.gates.outcome import GateResult
from milepost.graph.models import Milestone, WorkItem
from milepost.results import GateRun
from milepost.service._prepared import Prepared

__all__ = [
    "DEPS",
    "EVENTS",
    "FOCUS",
    "ITEMS",
    "MANIFESTS",
    "MILESTONES",
    "MILESTONE_ROW_FIELDS",
    "REFS",
    "RUNS",
    "gate_run",
    "item",
    "milestone",
    "milestone_row",
    "milestone_state",
    "plain",
    "run_row",
]

# What a transition changes in a milestone's row.
STATE_FIELDS = frozenset({"status", "attempts", "reason", "awaiting_review", "retry_at", "fingerprint"})
# What is fixed when a milestone is created (with its state).
DEFINITION_FIELDS = frozenset(
    {
        "name",
        "acceptance",
        "gate",
        "do",
        "do_timeout",
        "do_budget_usd",
        "do_usage",
        "retries",
        "timeout",
        "review",
        "fix",
        "retry_delay",
        "status",
        "attempts",
        "inputs",
        "cache",
        "flaky",
    }
)

# -- the hot paths' statements, built once ------------------------------------------

# A write locks the item and reads what every write checks; the rest of the
# row (waits, todos, defaults) is read only by the writes that use it.
HEAD_COLUMNS = (ITEMS.c.id, ITEMS.c.agent, ITEMS.c.state, ITEMS.c.plan_status, ITEMS.c.revision)
LOCK_ITEM = Prepared(select(*HEAD_COLUMNS).where(ITEMS.c.id == bindparam("item")).with_for_update())
ITEM_ROW = Prepared(select(ITEMS).where(ITEMS.c.id == bindparam("item")))
# One milestone with its deps' names and statuses, in one round trip (a
# milestone without deps comes back as one row with NULL dep columns).
_DEP = MILESTONES.alias("dep")
_ONE = (
    select(
        *(c for c in MILESTONES.c if c.name not in ("item_id", "lease_info", "created_at")),
        _DEP.c.seq.label("dep_seq"),
        _DEP.c.name.label("dep_name"),
        _DEP.c.status.label("dep_status"),
    )
    .select_from(
        MILESTONES.outerjoin(DEPS, DEPS.c.milestone_id == MILESTONES.c.id).outerjoin(_DEP, _DEP.c.id == DEPS.c.dep_id)
    )
    .order_by(DEPS.c.position)
)
ONE_MILESTONE = Prepared(_ONE.where(MILESTONES.c.item_id == bindparam("item"), MILESTONES.c.name == bindparam("name")))
MILESTONE_BY_PK = Prepared(_ONE.where(MILESTONES.c.id == bindparam("pk")))
SAVE_STATE = Prepared(
    update(MILESTONES)
    .where(MILESTONES.c.id == bindparam("pk"))
    .values({f: bindparam(f) for f in sorted(STATE_FIELDS)} | {"updated_at": bindparam("now")})
)
BUMP_REVISION = Prepared(
    update(ITEMS)
    .where(ITEMS.c.id == bindparam("item"), ITEMS.c.revision == bindparam("old"))
    .values(revision=bindparam("new"), updated_at=bindparam("now"))
)
# New milestones and their deps, written in batches (``plan apply`` of 100,000
# milestones): each row's values through the columns' processors, one
# ``executemany``; the new rows' keys read back by their ids (``seq``).
NEW_MILESTONE_FIELDS = (*sorted(DEFINITION_FIELDS), "awaiting_review", "item_id", "seq", "created_at", "updated_at")
ADD_MILESTONES = Prepared(insert(MILESTONES).values({f: bindparam(f) for f in NEW_MILESTONE_FIELDS}))
DEP_FIELDS = ("milestone_id", "dep_id", "item_id", "position")
ADD_DEPS = Prepared(insert(DEPS).values({f: bindparam(f) for f in DEP_FIELDS}))
NEW_KEYS = Prepared(
    select(MILESTONES.c.seq, MILESTONES.c.id).where(
        MILESTONES.c.item_id == bindparam("item"), MILESTONES.c.seq.between(bindparam("lo"), bindparam("hi"))
    )
)
EVENT_FIELDS = ("item_id", "milestone", "action", "from_status", "to_status", "reason", "agent", "revision", "at")
ADD_EVENTS = Prepared(insert(EVENTS).values({f: bindparam(f) for f in EVENT_FIELDS}))
# ``next`` at any size: the lowest-id ready milestones by indexed scans in id
# order, never the whole graph. Ready: pending, or needs_fix with budget left
# and not in review, with no dep that is not done.
_BLOCKER = MILESTONES.alias("blocker")
_NO_BLOCKER = ~exists(
    select(DEPS.c.dep_id)
    .select_from(DEPS.join(_BLOCKER, _BLOCKER.c.id == DEPS.c.dep_id))
    .where(DEPS.c.milestone_id == MILESTONES.c.id, _BLOCKER.c.status != "done")
)
# Two index ranges (ix_milestones_item_status_seq) rather than one OR the planner may scan the item for.
READY_PENDING = Prepared(
    select(MILESTONES.c.seq, MILESTONES.c.name)
    .where(MILESTONES.c.item_id == bindparam("item"), MILESTONES.c.status == "pending", _NO_BLOCKER)
    .order_by(MILESTONES.c.seq)
    .limit(bindparam("limit"))
)
READY_RETRY = Prepared(
    select(MILESTONES.c.seq, MILESTONES.c.name)
    .where(
        MILESTONES.c.item_id == bindparam("item"),
        MILESTONES.c.status == "needs_fix",
        MILESTONES.c.attempts < MILESTONES.c.retries + 1,
        MILESTONES.c.awaiting_review == false(),
        _NO_BLOCKER,
    )
    .order_by(MILESTONES.c.seq)
    .limit(bindparam("limit"))
)
# When none is ready: the ones that say why (neither done nor pending), and the counts.
HOLDING = Prepared(
    select(
        MILESTONES.c.seq,
        MILESTONES.c.name,
        MILESTONES.c.status,
        MILESTONES.c.attempts,
        MILESTONES.c.retries,
        MILESTONES.c.awaiting_review,
    )
    .where(MILESTONES.c.item_id == bindparam("item"), MILESTONES.c.status != "done", MILESTONES.c.status != "pending")
    .order_by(MILESTONES.c.seq)
)
WITH_INPUTS = Prepared(
    select(MILESTONES.c.id)
    .where(MILESTONES.c.item_id == bindparam("item"), func.json_array_length(MILESTONES.c.inputs) > 0)
    .limit(1)
)
COUNTS = Prepared(
    select(func.count().label("total"), func.count().filter(MILESTONES.c.status == "done").label("done")).where(
        MILESTONES.c.item_id == bindparam("item")
    )
)
LEASE = select(MILESTONES.c.lease_owner, MILESTONES.c.lease_expires).where(MILESTONES.c.id == bindparam("pk"))
LAST_ATTEMPT = select(func.max(RUNS.c.attempt)).where(RUNS.c.milestone_id == bindparam("pk"))
# A gate's claim and its record (every milestone of a drive; see claims.py).
LEASE_ROW = Prepared(LEASE)
LAST_ATTEMPT_OF = Prepared(select(func.max(RUNS.c.attempt).label("last")).where(RUNS.c.milestone_id == bindparam("pk")))
# A lease is taken only where no other owner holds one (the statement's row
# count says which); with its start (START_LEASED) the state goes in the same
# row write, and only where no lease at all is held.
_FREE = (MILESTONES.c.lease_owner.is_(None)) | (MILESTONES.c.lease_owner == bindparam("owner"))
_LEASE_VALUES: dict[str, Any] = {
    "lease_owner": bindparam("owner"),
    "lease_expires": bindparam("expires"),
    "lease_info": bindparam("info"),
}
TAKE_LEASE = Prepared(update(MILESTONES).where(MILESTONES.c.id == bindparam("pk"), _FREE).values(_LEASE_VALUES))
START_LEASED = Prepared(  # (a milestone not in progress holds no lease of its own: only a free one is taken)
    update(MILESTONES)
    .where(MILESTONES.c.id == bindparam("pk"), MILESTONES.c.lease_owner.is_(None))
    .values({f: bindparam(f) for f in sorted(STATE_FIELDS)} | {"updated_at": bindparam("now")} | _LEASE_VALUES)
)
DROP_LEASE = Prepared(
    update(MILESTONES)
    .where(MILESTONES.c.id == bindparam("pk"), MILESTONES.c.lease_owner == bindparam("owner"))
    .values(lease_owner=None, lease_expires=None, lease_info=None)
)
ADD_RUN = Prepared(insert(RUNS).values({c.name: bindparam(c.name) for c in RUNS.c if c.name != "id"}))
ADD_REF = Prepared(insert(REFS).values({f: bindparam(f) for f in ("item_id", "kind", "ref", "reason", "at")}))


def plain(values: Mapping[str, Any]) -> dict[str, Any]:
    """Values for a statement: enums as their stored strings."""
    return {k: v.value if isinstance(v, Enum) else v for k, v in values.items()}


def milestone(row: Row[Any] | Mapping[str, Any], deps: list[str]) -> Milestone:
    """A milestone from its row (the row's ``seq`` is the milestone's id)."""
    data = dict(row._mapping if isinstance(row, Row) else row)
    data["id"] = data["seq"]
    data["deps"] = deps
    return Milestone.model_validate(data)


def with_deps(found: Sequence[Mapping[str, Any]]) -> tuple[Milestone, list[Milestone]]:
    """A milestone and its deps (names and statuses only) from the rows of
    :data:`ONE_MILESTONE` or :data:`MILESTONE_BY_PK`."""
    deps = [Milestone(id=r["dep_seq"], name=r["dep_name"], status=r["dep_status"]) for r in found if r["dep_name"]]
    return milestone(found[0], [d.name for d in deps]), deps


def milestone_state(m: Milestone) -> dict[str, Any]:
    """The columns a transition writes."""
    return plain(m.model_dump(include=set(STATE_FIELDS)))


# The values of a new milestone's row, in this order (:func:`milestone_row`):
# the fields of NEW_MILESTONE_FIELDS but those all the milestones of an item share.
MILESTONE_ROW_FIELDS = (
    "acceptance",
    "attempts",
    "awaiting_review",
    "cache",
    "do",
    "do_budget_usd",
    "do_timeout",
    "do_usage",
    "fix",
    "flaky",
    "gate",
    "inputs",
    "name",
    "retries",
    "retry_delay",
    "review",
    "status",
    "timeout",
    "seq",
)


def milestone_row(m: Milestone) -> tuple[Any, ...]:
    """A new milestone's row: the values of :data:`MILESTONE_ROW_FIELDS`."""
    return (
        m.acceptance,
        m.attempts,
        m.awaiting_review,
        m.cache,
        m.do,
        m.do_budget_usd,
        m.do_timeout,
        m.do_usage,
        m.fix,
        m.flaky,
        [vars(c) for c in m.gate],  # its fields (str, dict, float): model_dump's value, faster (read, not kept)
        list(m.inputs),
        m.name,
        m.retries,
        m.retry_delay,
        m.review,
        m.status.value,
        m.timeout,
        m.id,
    )


def item(row: Row[Any], milestones: list[Milestone], *, revision: int, current: bool) -> WorkItem:
    """A work item from its row (readiness is derived by the caller)."""
    data = dict(row._mapping)
    data.update(
        revision=revision,
        current=current,
        waits=[data["wait"]] if data.get("wait") else [],
        after=data.get("after_item_id"),
        defaults=data.get("defaults") or {},
        doer=data.get("doer") or {},
        todo_list=data.get("todo_list") or [],
        milestones=milestones,
    )
    return WorkItem.model_validate(data)


def gate_run(
    row: Row[Any], item_id: int, name: str, log_path: str | None, cached_from: dict[str, Any] | None = None
) -> GateRun:
    data = {**row._mapping, "item": item_id, "milestone": name, "log_path": log_path, "cached_from": cached_from}
    data["rewrote"] = data.get("rewrote") or []
    return GateRun.model_validate(data)


def run_row(
    item_id: int,
    pk: int,
    attempt: int,
    result: GateResult,
    log_path: str | None,
    verdict: str | None,
    source_run_id: int | None = None,
) -> dict[str, Any]:
    """A gate run's row: the result's fields, the log path relative to the workspace."""
    data = result.model_dump(exclude={"log_path", "commands", "cached_from"})
    return {
        **plain(data),
        "commands": [c.model_dump(mode="json") for c in result.commands],
        "item_id": item_id,
        "milestone_id": pk,
        "attempt": attempt,
        "log_path": log_path,
        "verdict": verdict,
        "source_run_id": source_run_id,
    }

"""The store's tables, as SQLAlchemy Core ``Table`` objects (the service
speaks Core; the ORM would cost its import on every command). Every schema
change here needs an Alembic migration in ``milepost/migrations/versions``
(a test compares the two)."""

from __future__ import annotations

from datetime import UTC, datetime

from sqlalchemy import (
    JSON,
    Boolean,
    Column,
    DateTime,
    Float,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    TypeDecorator,
    UniqueConstraint,
    false,
    text,
    true,
)
from sqlalchemy.engine import Dialect

NAMING = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}


def utcnow() -> datetime:
    return datetime.now(UTC)


class UTCDateTime(TypeDecorator[datetime]):
    """Aware UTC datetimes on every backend (SQLite keeps no zone)."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError("naive datetime given to the store; use an aware UTC datetime")
        value = value.astimezone(UTC)
        return value.replace(tzinfo=None) if dialect.name == "sqlite" else value

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


metadata = MetaData(naming_convention=NAMING)


def _id() -> Column[int]:
    return Column("id", Integer, primary_key=True)


def _fk(
    name: str,
    target: str,
    *,
    ondelete: str | None = "CASCADE",
    index: bool = False,
    nullable: bool = False,
    primary_key: bool = False,
) -> Column[int]:
    return Column(
        name, Integer, ForeignKey(target, ondelete=ondelete), index=index, nullable=nullable, primary_key=primary_key
    )


ITEMS = Table(
    "work_items",
    metadata,
    _id(),
    Column("agent", String(64), nullable=False, index=True),
    Column("objective", Text, nullable=False),
    Column("state", String(16), nullable=False, default="open"),
    Column("plan_status", String(16), nullable=False, default="draft"),
    Column("todo_list", JSON, nullable=False, default=list),
    Column("blocked_by", Text),
    # True when the active wait set blocked_by (settling the wait clears it).
    Column("blocked_by_wait", Boolean, nullable=False, default=False, server_default=false()),
    Column("recheck_at", UTCDateTime),
    Column("recheck_consumed_at", UTCDateTime),
    Column("wait", JSON),
    Column("report", Text),
    Column("cancel_reason", Text),
    _fk("after_item_id", "work_items.id", ondelete=None, nullable=True),
    Column("defaults", JSON, nullable=False, default=dict),
    Column("doer", JSON),  # the item's doer: block (graph.models.DoerSettings); NULL: its defaults
    Column("revision", Integer, nullable=False, default=1),
    Column("created_at", UTCDateTime, nullable=False, default=utcnow),
    Column("updated_at", UTCDateTime, nullable=False, default=utcnow),
    Column("completed_at", UTCDateTime),
)

MILESTONES = Table(
    "milestones",
    metadata,
    _id(),
    _fk("item_id", "work_items.id", index=True),
    Column("seq", Integer, nullable=False),
    Column("name", String(64), nullable=False),
    Column("acceptance", Text, nullable=False, default=""),
    Column("gate", JSON, nullable=False, default=list),
    Column("retries", Integer, nullable=False, default=2),
    Column("timeout", Float),
    Column("review", Boolean, nullable=False, default=False),
    Column("awaiting_review", Boolean, nullable=False, default=False, server_default=false()),
    Column("fix", Text),
    Column("retry_delay", Float),
    Column("retry_at", UTCDateTime),
    Column("status", String(16), nullable=False, default="pending"),
    Column("attempts", Integer, nullable=False, default=0),
    Column("reason", Text),
    Column("lease_owner", String(200)),
    Column("lease_expires", UTCDateTime),
    # Where the leased attempt runs: host, boot id, driver pid, log path (see service.claims).
    Column("lease_info", JSON),
    # Proof bound to inputs (gates/inputs.py): patterns, cache and flaky flags,
    # and the fingerprint of the attempt that set the current status.
    Column("inputs", JSON, nullable=False, default=list, server_default=text("'[]'")),
    Column("cache", Boolean, nullable=False, default=True, server_default=true()),
    Column("flaky", Boolean, nullable=False, default=False, server_default=false()),
    Column("fingerprint", String(64)),
    # Agents as doers (docs/doers.md): the command that does the work, its timeout and its budget.
    Column("do", Text),
    Column("do_timeout", Float),
    Column("do_budget_usd", Float),
    # The form of its doer's usage report, and the agent session its doers resume (read from their reports).
    Column("do_usage", String(16)),
    Column("doer_session", String(200)),
    Column("created_at", UTCDateTime, nullable=False, default=utcnow),
    Column("updated_at", UTCDateTime, nullable=False, default=utcnow),
    UniqueConstraint("item_id", "seq", name="uq_milestones_item_seq"),
    UniqueConstraint("item_id", "name", name="uq_milestones_item_name"),
    # ``next``: the lowest-id pending (or needs_fix) milestones of an item, by one index range each.
    Index("ix_milestones_item_status_seq", "item_id", "status", "seq"),
)

DEPS = Table(
    "milestone_deps",
    metadata,
    _fk("milestone_id", "milestones.id", primary_key=True),
    _fk("dep_id", "milestones.id", primary_key=True),
    _fk("item_id", "work_items.id", index=True),
    Column("position", Integer, nullable=False, default=0),
)

RUNS = Table(
    "gate_runs",
    metadata,
    _id(),
    _fk("item_id", "work_items.id", index=True),
    _fk("milestone_id", "milestones.id", index=True),
    Column("attempt", Integer, nullable=False),
    Column("outcome", String(16), nullable=False),
    Column("exit_code", Integer),
    Column("duration", Float, nullable=False, default=0.0),
    Column("reason", Text, nullable=False, default=""),
    Column("tail", Text, nullable=False, default=""),
    Column("log_path", Text),  # relative to the workspace root
    Column("host", String(255)),  # the machine that ran it (its log is there)
    Column("commands", JSON, nullable=False, default=list),
    Column("verdict", Text),
    Column("started_at", UTCDateTime, nullable=False),
    Column("finished_at", UTCDateTime, nullable=False),
    # What the attempt ran on (gates/inputs.py): its fingerprint (indexed: the
    # gate cache looks passed runs up by it), the key of its file list in
    # input_manifests, how many files, inputs its own gate changed, and for a
    # ``cached`` attempt the passed run that stands in for it.
    Column("fingerprint", String(64), index=True),
    Column("inputs_digest", String(64)),
    Column("inputs_files", Integer),
    Column("rewrote", JSON),
    Column("source_run_id", Integer),
    UniqueConstraint("milestone_id", "attempt", name="uq_gate_runs_milestone_attempt"),
)

# What a doer did in an attempt (before the attempt's gate; its row in gate_runs
# is the attempt's verdict): its command and end, the commits it started from and
# left, what it changed, what it said it cost, and the merge its passed attempt made.
DO_RUNS = Table(
    "do_runs",
    metadata,
    _id(),
    _fk("item_id", "work_items.id", index=True),
    _fk("milestone_id", "milestones.id", index=True),
    Column("attempt", Integer, nullable=False),
    Column("outcome", String(16), nullable=False),
    Column("exit_code", Integer),
    Column("duration", Float, nullable=False, default=0.0),
    Column("reason", Text, nullable=False, default=""),
    Column("tail", Text, nullable=False, default=""),
    Column("log_path", Text),  # relative to the workspace root
    Column("host", String(255)),
    Column("command", Text, nullable=False),
    Column("worktree", Text),
    Column("base_commit", String(64)),
    Column("result_commit", String(64)),
    Column("diff_stat", Text),
    Column("diff_digest", String(64)),
    Column("cost_usd", Float),
    Column("tokens", Integer),
    Column("session", String(200)),  # the agent's session or thread id, from its usage report
    Column("usage_warning", Text),  # a usage report that could not be read, or figures left out
    Column("merge_commit", String(64)),
    Column("files", JSON),  # the paths its change touched, a list (at most 1000: see do_evidence)
    Column("started_at", UTCDateTime, nullable=False),
    Column("finished_at", UTCDateTime, nullable=False),
    UniqueConstraint("milestone_id", "attempt", name="uq_do_runs_milestone_attempt"),
)

# The file lists of proofs, by the digest of the list (shared by every run
# proven on the same files): what a stale milestone's changed paths are read from.
MANIFESTS = Table(
    "input_manifests",
    metadata,
    Column("digest", String(64), primary_key=True),
    Column("files", JSON, nullable=False),
    Column("created_at", UTCDateTime, nullable=False, default=utcnow),
)

# The units of proof that passed (a gate command run once per file, see
# milepost.gates.units), by the digest of the unit's command and inputs: a
# unit in the same state is not run again, whichever gate includes it.
UNIT_PASSES = Table(
    "unit_passes",
    metadata,
    Column("digest", String(64), primary_key=True),
    _fk("item_id", "work_items.id", index=True),
    Column("milestone", String(64), nullable=False),
    Column("attempt", Integer, nullable=False),
    Column("file", Text, nullable=False),
    Column("duration", Float, nullable=False, default=0.0),
    Column("created_at", UTCDateTime, nullable=False, default=utcnow),
)

# Append-only log of every transition, for audit and ``history``.
EVENTS = Table(
    "events",
    metadata,
    _id(),
    _fk("item_id", "work_items.id", index=True),
    Column("milestone", String(64)),
    Column("action", String(32), nullable=False),
    Column("from_status", String(16)),
    Column("to_status", String(16)),
    Column("reason", Text),
    Column("agent", String(64), nullable=False),
    Column("revision", Integer, nullable=False),
    Column("at", UTCDateTime, nullable=False, default=utcnow),
)

FOCUS = Table(
    "focus",
    metadata,
    Column("agent", String(64), primary_key=True),
    _fk("item_id", "work_items.id", ondelete="SET NULL", nullable=True),
)

# Facts about the store itself: ``store_id`` (a random id written when the
# store is created; the evidence on disk is filed under it).
META = Table(
    "store_meta",
    metadata,
    Column("key", String(64), primary_key=True),
    Column("value", Text, nullable=False),
)

REFS = Table(
    "work_refs",
    metadata,
    _id(),
    _fk("item_id", "work_items.id", index=True),
    Column("kind", String(32), nullable=False),
    Column("ref", Text, nullable=False),
    Column("reason", Text, nullable=False, default=""),
    Column("at", UTCDateTime, nullable=False, default=utcnow),
)

"""SQLAlchemy ORM tables. Every schema change here needs an Alembic
migration in ``milepost/migrations/versions`` (a test compares the two)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from sqlalchemy import (
    JSON,
    Boolean,
    DateTime,
    Float,
    ForeignKey,
    Integer,
    MetaData,
    String,
    Text,
    TypeDecorator,
    UniqueConstraint,
    false,
)
from sqlalchemy.engine import Dialect
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

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


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING)
    type_annotation_map = {dict[str, Any]: JSON, list[Any]: JSON, datetime: UTCDateTime}


class ItemRow(Base):
    __tablename__ = "work_items"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    agent: Mapped[str] = mapped_column(String(64), index=True)
    objective: Mapped[str] = mapped_column(Text)
    state: Mapped[str] = mapped_column(String(16), default="open")
    plan_status: Mapped[str] = mapped_column(String(16), default="draft")
    todo_list: Mapped[list[Any]] = mapped_column(default=list)
    blocked_by: Mapped[str | None] = mapped_column(Text)
    # True when the active wait set blocked_by (settling the wait clears it).
    blocked_by_wait: Mapped[bool] = mapped_column(Boolean, default=False, server_default=false())
    recheck_at: Mapped[datetime | None]
    recheck_consumed_at: Mapped[datetime | None]
    wait: Mapped[dict[str, Any] | None]
    report: Mapped[str | None] = mapped_column(Text)
    cancel_reason: Mapped[str | None] = mapped_column(Text)
    after_item_id: Mapped[int | None] = mapped_column(ForeignKey("work_items.id"))
    defaults: Mapped[dict[str, Any]] = mapped_column(default=dict)
    revision: Mapped[int] = mapped_column(Integer, default=1)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(default=utcnow)
    completed_at: Mapped[datetime | None]


class MilestoneRow(Base):
    __tablename__ = "milestones"
    __table_args__ = (
        UniqueConstraint("item_id", "seq", name="uq_milestones_item_seq"),
        UniqueConstraint("item_id", "name", name="uq_milestones_item_name"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    item_id: Mapped[int] = mapped_column(ForeignKey("work_items.id", ondelete="CASCADE"), index=True)
    seq: Mapped[int] = mapped_column(Integer)
    name: Mapped[str] = mapped_column(String(64))
    acceptance: Mapped[str] = mapped_column(Text, default="")
    gate: Mapped[list[Any]] = mapped_column(default=list)
    retries: Mapped[int] = mapped_column(Integer, default=2)
    timeout: Mapped[float | None] = mapped_column(Float)
    review: Mapped[bool] = mapped_column(Boolean, default=False)
    awaiting_review: Mapped[bool] = mapped_column(Boolean, default=False, server_default=false())
    fix: Mapped[str | None] = mapped_column(Text)
    retry_delay: Mapped[float | None] = mapped_column(Float)
    retry_at: Mapped[datetime | None]
    status: Mapped[str] = mapped_column(String(16), default="pending")
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    reason: Mapped[str | None] = mapped_column(Text)
    lease_owner: Mapped[str | None] = mapped_column(String(200))
    lease_expires: Mapped[datetime | None]
    # Where the leased attempt runs: host, boot id, driver pid, log path (see service.claims).
    lease_info: Mapped[dict[str, Any] | None]
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(default=utcnow)


class DepRow(Base):
    __tablename__ = "milestone_deps"

    milestone_id: Mapped[int] = mapped_column(ForeignKey("milestones.id", ondelete="CASCADE"), primary_key=True)
    dep_id: Mapped[int] = mapped_column(ForeignKey("milestones.id", ondelete="CASCADE"), primary_key=True)
    item_id: Mapped[int] = mapped_column(ForeignKey("work_items.id", ondelete="CASCADE"), index=True)
    position: Mapped[int] = mapped_column(Integer, default=0)


class GateRunRow(Base):
    __tablename__ = "gate_runs"
    __table_args__ = (UniqueConstraint("milestone_id", "attempt", name="uq_gate_runs_milestone_attempt"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    item_id: Mapped[int] = mapped_column(ForeignKey("work_items.id", ondelete="CASCADE"), index=True)
    milestone_id: Mapped[int] = mapped_column(ForeignKey("milestones.id", ondelete="CASCADE"), index=True)
    attempt: Mapped[int] = mapped_column(Integer)
    outcome: Mapped[str] = mapped_column(String(16))
    exit_code: Mapped[int | None] = mapped_column(Integer)
    duration: Mapped[float] = mapped_column(Float, default=0.0)
    reason: Mapped[str] = mapped_column(Text, default="")
    tail: Mapped[str] = mapped_column(Text, default="")
    log_path: Mapped[str | None] = mapped_column(Text)  # relative to the workspace root
    host: Mapped[str | None] = mapped_column(String(255))  # the machine that ran it (its log is there)
    commands: Mapped[list[Any]] = mapped_column(default=list)
    verdict: Mapped[str | None] = mapped_column(Text)
    started_at: Mapped[datetime]
    finished_at: Mapped[datetime]


class EventRow(Base):
    """Append-only log of every transition, for audit and ``history``."""

    __tablename__ = "events"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    item_id: Mapped[int] = mapped_column(ForeignKey("work_items.id", ondelete="CASCADE"), index=True)
    milestone: Mapped[str | None] = mapped_column(String(64))
    action: Mapped[str] = mapped_column(String(32))
    from_status: Mapped[str | None] = mapped_column(String(16))
    to_status: Mapped[str | None] = mapped_column(String(16))
    reason: Mapped[str | None] = mapped_column(Text)
    agent: Mapped[str] = mapped_column(String(64))
    revision: Mapped[int] = mapped_column(Integer)
    at: Mapped[datetime] = mapped_column(default=utcnow)


class FocusRow(Base):
    __tablename__ = "focus"

    agent: Mapped[str] = mapped_column(String(64), primary_key=True)
    item_id: Mapped[int | None] = mapped_column(ForeignKey("work_items.id", ondelete="SET NULL"))


class MetaRow(Base):
    """Facts about the store itself: ``store_id`` (a random id written when
    the store is created; the evidence on disk is filed under it)."""

    __tablename__ = "store_meta"

    key: Mapped[str] = mapped_column(String(64), primary_key=True)
    value: Mapped[str] = mapped_column(Text)


class WorkRefRow(Base):
    __tablename__ = "work_refs"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    item_id: Mapped[int] = mapped_column(ForeignKey("work_items.id", ondelete="CASCADE"), index=True)
    kind: Mapped[str] = mapped_column(String(32))
    ref: Mapped[str] = mapped_column(Text)
    reason: Mapped[str] = mapped_column(Text, default="")
    at: Mapped[datetime] = mapped_column(default=utcnow)

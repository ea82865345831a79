"""initial schema

Revision ID: 0001
Revises:
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:

    op.create_table(
        "work_items",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("agent", sa.String(length=64), nullable=False),
        sa.Column("objective", sa.Text(), nullable=False),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column("plan_status", sa.String(length=16), nullable=False),
        sa.Column("todo_list", sa.JSON(), nullable=False),
        sa.Column("blocked_by", sa.Text(), nullable=True),
        sa.Column("recheck_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("wait", sa.JSON(), nullable=True),
        sa.Column("report", sa.Text(), nullable=True),
        sa.Column("cancel_reason", sa.Text(), nullable=True),
        sa.Column("after_item_id", sa.Integer(), nullable=True),
        sa.Column("defaults", sa.JSON(), nullable=False),
        sa.Column("revision", sa.Integer(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("completed_at", sa.DateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(
            ["after_item_id"], ["work_items.id"], name=op.f("fk_work_items_after_item_id_work_items")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_work_items")),
    )
    with op.batch_alter_table("work_items", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_work_items_agent"), ["agent"], unique=False)

    op.create_table(
        "events",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("item_id", sa.Integer(), nullable=False),
        sa.Column("milestone", sa.String(length=64), nullable=True),
        sa.Column("action", sa.String(length=32), nullable=False),
        sa.Column("from_status", sa.String(length=16), nullable=True),
        sa.Column("to_status", sa.String(length=16), nullable=True),
        sa.Column("reason", sa.Text(), nullable=True),
        sa.Column("agent", sa.String(length=64), nullable=False),
        sa.Column("revision", sa.Integer(), nullable=False),
        sa.Column("at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["item_id"], ["work_items.id"], name=op.f("fk_events_item_id_work_items"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_events")),
    )
    with op.batch_alter_table("events", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_events_item_id"), ["item_id"], unique=False)

    op.create_table(
        "focus",
        sa.Column("agent", sa.String(length=64), nullable=False),
        sa.Column("item_id", sa.Integer(), nullable=True),
        sa.ForeignKeyConstraint(
            ["item_id"], ["work_items.id"], name=op.f("fk_focus_item_id_work_items"), ondelete="SET NULL"
        ),
        sa.PrimaryKeyConstraint("agent", name=op.f("pk_focus")),
    )
    op.create_table(
        "milestones",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("item_id", sa.Integer(), nullable=False),
        sa.Column("seq", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(length=64), nullable=False),
        sa.Column("acceptance", sa.Text(), nullable=False),
        sa.Column("gate", sa.JSON(), nullable=False),
        sa.Column("retries", sa.Integer(), nullable=False),
        sa.Column("timeout", sa.Float(), nullable=True),
        sa.Column("review", sa.Boolean(), nullable=False),
        sa.Column("fix", sa.Text(), nullable=True),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("reason", sa.Text(), nullable=True),
        sa.Column("lease_owner", sa.String(length=200), nullable=True),
        sa.Column("lease_expires", sa.DateTime(timezone=True), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["item_id"], ["work_items.id"], name=op.f("fk_milestones_item_id_work_items"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_milestones")),
        sa.UniqueConstraint("item_id", "name", name="uq_milestones_item_name"),
        sa.UniqueConstraint("item_id", "seq", name="uq_milestones_item_seq"),
    )
    with op.batch_alter_table("milestones", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_milestones_item_id"), ["item_id"], unique=False)

    op.create_table(
        "work_refs",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("item_id", sa.Integer(), nullable=False),
        sa.Column("kind", sa.String(length=32), nullable=False),
        sa.Column("ref", sa.Text(), nullable=False),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["item_id"], ["work_items.id"], name=op.f("fk_work_refs_item_id_work_items"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_work_refs")),
    )
    with op.batch_alter_table("work_refs", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_work_refs_item_id"), ["item_id"], unique=False)

    op.create_table(
        "gate_runs",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("item_id", sa.Integer(), nullable=False),
        sa.Column("milestone_id", sa.Integer(), nullable=False),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.Column("outcome", sa.String(length=16), nullable=False),
        sa.Column("exit_code", sa.Integer(), nullable=True),
        sa.Column("duration", sa.Float(), nullable=False),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("tail", sa.Text(), nullable=False),
        sa.Column("log_path", sa.Text(), nullable=True),
        sa.Column("commands", sa.JSON(), nullable=False),
        sa.Column("verdict", sa.Text(), nullable=True),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["item_id"], ["work_items.id"], name=op.f("fk_gate_runs_item_id_work_items"), ondelete="CASCADE"
        ),
        sa.ForeignKeyConstraint(
            ["milestone_id"], ["milestones.id"], name=op.f("fk_gate_runs_milestone_id_milestones"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_gate_runs")),
        sa.UniqueConstraint("milestone_id", "attempt", name="uq_gate_runs_milestone_attempt"),
    )
    with op.batch_alter_table("gate_runs", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_gate_runs_item_id"), ["item_id"], unique=False)
        batch_op.create_index(batch_op.f("ix_gate_runs_milestone_id"), ["milestone_id"], unique=False)

    op.create_table(
        "milestone_deps",
        sa.Column("milestone_id", sa.Integer(), nullable=False),
        sa.Column("dep_id", sa.Integer(), nullable=False),
        sa.Column("item_id", sa.Integer(), nullable=False),
        sa.Column("position", sa.Integer(), nullable=False),
        sa.ForeignKeyConstraint(
            ["dep_id"], ["milestones.id"], name=op.f("fk_milestone_deps_dep_id_milestones"), ondelete="CASCADE"
        ),
        sa.ForeignKeyConstraint(
            ["item_id"], ["work_items.id"], name=op.f("fk_milestone_deps_item_id_work_items"), ondelete="CASCADE"
        ),
        sa.ForeignKeyConstraint(
            ["milestone_id"],
            ["milestones.id"],
            name=op.f("fk_milestone_deps_milestone_id_milestones"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("milestone_id", "dep_id", name=op.f("pk_milestone_deps")),
    )
    with op.batch_alter_table("milestone_deps", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_milestone_deps_item_id"), ["item_id"], unique=False)


def downgrade() -> None:

    with op.batch_alter_table("milestone_deps", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_milestone_deps_item_id"))

    op.drop_table("milestone_deps")
    with op.batch_alter_table("gate_runs", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_gate_runs_milestone_id"))
        batch_op.drop_index(batch_op.f("ix_gate_runs_item_id"))

    op.drop_table("gate_runs")
    with op.batch_alter_table("work_refs", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_work_refs_item_id"))

    op.drop_table("work_refs")
    with op.batch_alter_table("milestones", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_milestones_item_id"))

    op.drop_table("milestones")
    op.drop_table("focus")
    with op.batch_alter_table("events", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_events_item_id"))

    op.drop_table("events")
    with op.batch_alter_table("work_items", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_work_items_agent"))

    op.drop_table("work_items")

"""doers: a milestone's do command, its timeout and budget; an item's doer block; what each doer did

Revision ID: 0007
Revises: 0006
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("milestones", sa.Column("do", sa.Text(), nullable=True))
    op.add_column("milestones", sa.Column("do_timeout", sa.Float(), nullable=True))
    op.add_column("milestones", sa.Column("do_budget_usd", sa.Float(), nullable=True))
    op.add_column("work_items", sa.Column("doer", sa.JSON(), nullable=True))
    op.create_table(
        "do_runs",
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
        sa.Column("host", sa.String(length=255), nullable=True),
        sa.Column("command", sa.Text(), nullable=False),
        sa.Column("worktree", sa.Text(), nullable=True),
        sa.Column("base_commit", sa.String(length=64), nullable=True),
        sa.Column("result_commit", sa.String(length=64), nullable=True),
        sa.Column("diff_stat", sa.Text(), nullable=True),
        sa.Column("diff_digest", sa.String(length=64), nullable=True),
        sa.Column("cost_usd", sa.Float(), nullable=True),
        sa.Column("tokens", sa.Integer(), nullable=True),
        sa.Column("merge_commit", sa.String(length=64), nullable=True),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["item_id"], ["work_items.id"], name=op.f("fk_do_runs_item_id_work_items"), ondelete="CASCADE"
        ),
        sa.ForeignKeyConstraint(
            ["milestone_id"], ["milestones.id"], name=op.f("fk_do_runs_milestone_id_milestones"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_do_runs")),
        sa.UniqueConstraint("milestone_id", "attempt", name="uq_do_runs_milestone_attempt"),
    )
    op.create_index(op.f("ix_do_runs_item_id"), "do_runs", ["item_id"], unique=False)
    op.create_index(op.f("ix_do_runs_milestone_id"), "do_runs", ["milestone_id"], unique=False)


def downgrade() -> None:
    op.drop_index(op.f("ix_do_runs_milestone_id"), table_name="do_runs")
    op.drop_index(op.f("ix_do_runs_item_id"), table_name="do_runs")
    op.drop_table("do_runs")
    with op.batch_alter_table("work_items") as batch:
        batch.drop_column("doer")
    with op.batch_alter_table("milestones") as batch:
        batch.drop_column("do_budget_usd")
        batch.drop_column("do_timeout")
        batch.drop_column("do")

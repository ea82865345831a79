"""inputs and fingerprints: milestones.inputs/cache/flaky/fingerprint, gate_runs fingerprint columns, input_manifests;
an index for next (milestones by item, status, seq)

Revision ID: 0005
Revises: 0004
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # Plain ADD COLUMN (SQLite does it in place); existing milestones have no inputs.
    op.add_column("milestones", sa.Column("inputs", sa.JSON(), nullable=False, server_default=sa.text("'[]'")))
    op.add_column("milestones", sa.Column("cache", sa.Boolean(), nullable=False, server_default=sa.true()))
    op.add_column("milestones", sa.Column("flaky", sa.Boolean(), nullable=False, server_default=sa.false()))
    op.add_column("milestones", sa.Column("fingerprint", sa.String(length=64), nullable=True))
    op.add_column("gate_runs", sa.Column("fingerprint", sa.String(length=64), nullable=True))
    op.add_column("gate_runs", sa.Column("inputs_digest", sa.String(length=64), nullable=True))
    op.add_column("gate_runs", sa.Column("inputs_files", sa.Integer(), nullable=True))
    op.add_column("gate_runs", sa.Column("rewrote", sa.JSON(), nullable=True))
    op.add_column("gate_runs", sa.Column("source_run_id", sa.Integer(), nullable=True))
    op.create_index(op.f("ix_gate_runs_fingerprint"), "gate_runs", ["fingerprint"], unique=False)
    op.create_index("ix_milestones_item_status_seq", "milestones", ["item_id", "status", "seq"], unique=False)
    op.create_table(
        "input_manifests",
        sa.Column("digest", sa.String(length=64), nullable=False),
        sa.Column("files", sa.JSON(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("digest", name=op.f("pk_input_manifests")),
    )


def downgrade() -> None:
    op.drop_table("input_manifests")
    op.drop_index("ix_milestones_item_status_seq", table_name="milestones")
    op.drop_index(op.f("ix_gate_runs_fingerprint"), table_name="gate_runs")
    with op.batch_alter_table("gate_runs", schema=None) as batch_op:
        for col in ("source_run_id", "rewrote", "inputs_files", "inputs_digest", "fingerprint"):
            batch_op.drop_column(col)
    with op.batch_alter_table("milestones", schema=None) as batch_op:
        for col in ("fingerprint", "flaky", "cache", "inputs"):
            batch_op.drop_column(col)

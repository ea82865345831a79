"""unit passes: the units of proof (a gate command run once per file) that passed, by digest

Revision ID: 0006
Revises: 0005
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "unit_passes",
        sa.Column("digest", sa.String(length=64), nullable=False),
        sa.Column("item_id", sa.Integer(), nullable=False),
        sa.Column("milestone", sa.String(length=64), nullable=False),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.Column("file", sa.Text(), nullable=False),
        sa.Column("duration", sa.Float(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["item_id"], ["work_items.id"], name=op.f("fk_unit_passes_item_id_work_items"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("digest", name=op.f("pk_unit_passes")),
    )
    op.create_index(op.f("ix_unit_passes_item_id"), "unit_passes", ["item_id"], unique=False)


def downgrade() -> None:
    op.drop_index(op.f("ix_unit_passes_item_id"), table_name="unit_passes")
    op.drop_table("unit_passes")

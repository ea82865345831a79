"""review gates and retry delays: milestones.awaiting_review, retry_delay, retry_at

Revision ID: 0002
Revises: 0001
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # Plain ADD COLUMN: SQLite does it in place (a batch copy would re-create the table).
    op.add_column("milestones", sa.Column("awaiting_review", sa.Boolean(), server_default=sa.false(), nullable=False))
    op.add_column("milestones", sa.Column("retry_delay", sa.Float(), nullable=True))
    op.add_column("milestones", sa.Column("retry_at", sa.DateTime(timezone=True), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("milestones", schema=None) as batch_op:
        batch_op.drop_column("retry_at")
        batch_op.drop_column("retry_delay")
        batch_op.drop_column("awaiting_review")

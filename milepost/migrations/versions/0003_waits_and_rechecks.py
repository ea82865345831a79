"""waits and rechecks: work_items.blocked_by_wait, recheck_consumed_at

Revision ID: 0003
Revises: 0002
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # Plain ADD COLUMN: SQLite does it in place (a batch copy would re-create the table).
    op.add_column("work_items", sa.Column("blocked_by_wait", sa.Boolean(), server_default=sa.false(), nullable=False))
    op.add_column("work_items", sa.Column("recheck_consumed_at", sa.DateTime(timezone=True), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("work_items", schema=None) as batch_op:
        batch_op.drop_column("recheck_consumed_at")
        batch_op.drop_column("blocked_by_wait")

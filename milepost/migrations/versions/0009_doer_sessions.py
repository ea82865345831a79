"""doer sessions and usage: a milestone's usage form and its agent's session; a do run's session and warning

Revision ID: 0009
Revises: 0008
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("milestones", sa.Column("do_usage", sa.String(length=16), nullable=True))
    op.add_column("milestones", sa.Column("doer_session", sa.String(length=200), nullable=True))
    op.add_column("do_runs", sa.Column("session", sa.String(length=200), nullable=True))
    op.add_column("do_runs", sa.Column("usage_warning", sa.Text(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("do_runs") as batch:
        batch.drop_column("usage_warning")
        batch.drop_column("session")
    with op.batch_alter_table("milestones") as batch:
        batch.drop_column("doer_session")
        batch.drop_column("do_usage")

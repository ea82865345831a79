"""do run files: the paths a doer's change touched

Revision ID: 0008
Revises: 0007
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("do_runs", sa.Column("files", sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("do_runs") as batch:
        batch.drop_column("files")

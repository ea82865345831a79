"""store identity and fencing: store_meta (store_id), milestones.lease_info, gate_runs.host

Revision ID: 0004
Revises: 0003
"""

from __future__ import annotations

import uuid

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    meta = op.create_table(
        "store_meta",
        sa.Column("key", sa.String(length=64), nullable=False),
        sa.Column("value", sa.Text(), nullable=False),
        sa.PrimaryKeyConstraint("key", name=op.f("pk_store_meta")),
    )
    rows = [{"key": "store_id", "value": uuid.uuid4().hex}]
    # A store made before 0004 kept its plan.md files outside a store-id folder.
    if op.get_bind().execute(sa.text("SELECT COUNT(*) FROM work_items")).scalar():
        rows.append({"key": "legacy_layout", "value": "1"})
    op.bulk_insert(meta, rows)
    # Plain ADD COLUMN: SQLite does it in place (a batch copy would re-create the table).
    op.add_column("milestones", sa.Column("lease_info", sa.JSON(), nullable=True))
    op.add_column("gate_runs", sa.Column("host", sa.String(length=255), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("gate_runs", schema=None) as batch_op:
        batch_op.drop_column("host")
    with op.batch_alter_table("milestones", schema=None) as batch_op:
        batch_op.drop_column("lease_info")
    op.drop_table("store_meta")

"""Alembic environment: milepost runs migrations itself on open, handing the
connection in through ``config.attributes``; there is no alembic.ini."""

from __future__ import annotations

from alembic import context

from milepost._schema import metadata

config = context.config
connection = config.attributes.get("connection")
if connection is None:  # pragma: no cover - only for `alembic` run by hand
    from sqlalchemy import create_engine

    connection = create_engine(config.get_main_option("sqlalchemy.url") or "sqlite://").connect()

context.configure(
    connection=connection,
    target_metadata=metadata,
    render_as_batch=connection.dialect.name == "sqlite",
    compare_type=True,
)
with context.begin_transaction():
    context.run_migrations()

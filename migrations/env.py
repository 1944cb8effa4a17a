"""Alembic environment: runs on the connection `ledger.persistence.migrate` hands it."""

from __future__ import annotations

from alembic import context

from ledger.persistence.schema import metadata

connection = context.config.attributes.get("connection")
if connection is None:  # pragma: no cover - only `outcomes migrate` drives Alembic
    raise RuntimeError("run migrations with `outcomes migrate`")

context.configure(
    connection=connection,
    target_metadata=metadata,
    render_as_batch=connection.dialect.name == "sqlite",
    compare_type=True,
)
with context.begin_transaction():
    context.run_migrations()

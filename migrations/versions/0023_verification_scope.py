"""A recorded verification says what it covered (`scope`): `full` (every event), `since` (the
events after a trusted tree head, and the streams they touched) or `sample` (N events proved
against the head). `outcomes status`, the console and `/metrics` no longer show a sample as a
range checked. Rows recorded before it take `full`: which of them were `--since` or `--sample`
runs was not recorded.

Revision ID: 0023
Revises: 0022
Create Date: 2026-12-06
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0023"
down_revision = "0022"
branch_labels = None
depends_on = None


SCOPE = sa.Column("scope", sa.String(16), nullable=False, server_default="full")
# SQLite keeps each table's CREATE text, and an ADD COLUMN edits it in place: the table is made
# again from its declaration instead (a few rows), so the text is the schema's (the migration
# tests compare them), AUTOINCREMENT included.
SQLITE_TABLE = {"recreate": "always", "table_kwargs": {"sqlite_autoincrement": True}}


def upgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.add_column("verifications", SCOPE)
        return
    with op.batch_alter_table("verifications", **SQLITE_TABLE) as batch:  # type: ignore[arg-type]
        batch.add_column(SCOPE)


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.drop_column("verifications", "scope")
        return
    with op.batch_alter_table("verifications", **SQLITE_TABLE) as batch:  # type: ignore[arg-type]
        batch.drop_column("scope")

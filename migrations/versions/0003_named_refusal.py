"""The append-only refusal names its constraint, so the store tells it apart by name.

Postgres only (SQLite reports trigger aborts with a code of their own).

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-30
"""

from __future__ import annotations

from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None

_FUNCTION = """
CREATE OR REPLACE FUNCTION outcomes_events_immutable() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'ledger events are append-only: % refused', TG_OP
        USING ERRCODE = 'insufficient_privilege'{named};
END $$
"""
_NAMED = ", CONSTRAINT = 'events_append_only', TABLE = TG_TABLE_NAME"


def upgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute(_FUNCTION.format(named=_NAMED))


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute(_FUNCTION.format(named=""))

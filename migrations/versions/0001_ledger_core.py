"""Ledger core: events (append-only), jobs, brakes and tokens read models.

Revision ID: 0001
Revises:
Create Date: 2026-11-30
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None

JSON = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")
POSITION = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
TIME = sa.DateTime(timezone=True)
TERMINAL = (
    "type IN ('job.outcome_missing', 'job.refused', 'work.declined', 'work.failed', "
    "'work.halted', 'work.partial', 'work.succeeded')"
)


# Postgres: the events table refuses UPDATE, DELETE and TRUNCATE (0003 names the refusal).
POSTGRES_IMMUTABILITY = [
    """
    CREATE OR REPLACE FUNCTION outcomes_events_immutable() RETURNS trigger
    LANGUAGE plpgsql AS $$
    BEGIN
        RAISE EXCEPTION 'ledger events are append-only: % refused', TG_OP
            USING ERRCODE = 'insufficient_privilege';
    END $$
    """,
    """
    CREATE TRIGGER events_no_update_delete BEFORE UPDATE OR DELETE ON events
    FOR EACH ROW EXECUTE FUNCTION outcomes_events_immutable()
    """,
    """
    CREATE TRIGGER events_no_truncate BEFORE TRUNCATE ON events
    FOR EACH STATEMENT EXECUTE FUNCTION outcomes_events_immutable()
    """,
]
POSTGRES_IMMUTABILITY_DOWN = [
    "DROP TRIGGER IF EXISTS events_no_truncate ON events",
    "DROP TRIGGER IF EXISTS events_no_update_delete ON events",
    "DROP FUNCTION IF EXISTS outcomes_events_immutable()",
]
# SQLite has no TRUNCATE; a DELETE without WHERE fires the row trigger too.
SQLITE_IMMUTABILITY = [
    """
    CREATE TRIGGER events_no_update BEFORE UPDATE ON events
    BEGIN SELECT RAISE(ABORT, 'ledger events are append-only: UPDATE refused'); END
    """,
    """
    CREATE TRIGGER events_no_delete BEFORE DELETE ON events
    BEGIN SELECT RAISE(ABORT, 'ledger events are append-only: DELETE refused'); END
    """,
]
SQLITE_IMMUTABILITY_DOWN = [
    "DROP TRIGGER IF EXISTS events_no_delete",
    "DROP TRIGGER IF EXISTS events_no_update",
]


def _postgres() -> bool:
    return bool(op.get_bind().dialect.name == "postgresql")


def upgrade() -> None:
    op.create_table(
        "events",
        sa.Column("position", POSITION, primary_key=True, autoincrement=True),
        sa.Column("stream_id", sa.String(200), nullable=False),
        sa.Column("stream_version", sa.Integer(), nullable=False),
        sa.Column("event_id", sa.Uuid(), nullable=False),
        sa.Column("type", sa.String(64), nullable=False),
        sa.Column("data", JSON, nullable=False),
        sa.Column("code", sa.String(64), nullable=True),
        sa.Column("actor", sa.String(200), nullable=False),
        sa.Column("recorded_at", TIME, nullable=False),
        sa.Column("prev_hash", sa.String(64), nullable=True),
        sa.Column("hash", sa.String(64), nullable=False),
        sa.PrimaryKeyConstraint("position", name="pk_events"),
        sa.CheckConstraint("position > 0", name="ck_events_position_positive"),
        sqlite_autoincrement=True,
    )
    op.create_index(
        "uq_events_stream_version", "events", ["stream_id", "stream_version"], unique=True
    )
    op.create_index("uq_events_event_id", "events", ["event_id"], unique=True)
    op.create_index(
        "uq_events_one_terminal",
        "events",
        ["stream_id"],
        unique=True,
        postgresql_where=sa.text(TERMINAL),
        sqlite_where=sa.text(TERMINAL),
    )

    op.create_table(
        "jobs",
        sa.Column("job_id", sa.String(36), nullable=False),
        sa.Column("account", sa.String(100), nullable=False),
        sa.Column("tool", sa.String(200), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("terminal", sa.Boolean(), nullable=False),
        sa.Column("accepted", sa.Boolean(), nullable=False),
        sa.Column("spends", sa.Boolean(), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("code", sa.String(64), nullable=True),
        sa.Column("idempotency_key", sa.String(200), nullable=True),
        sa.Column("ledger_position", POSITION, nullable=False),
        sa.Column("created_at", TIME, nullable=False),
        sa.Column("updated_at", TIME, nullable=False),
        sa.Column("lease_expires_at", TIME, nullable=True),
        sa.Column("due_at", TIME, nullable=True),
        sa.Column("view", JSON, nullable=False),
        sa.PrimaryKeyConstraint("job_id", name="pk_jobs"),
    )
    op.create_index("ix_jobs_account_position", "jobs", ["account", "ledger_position"])
    op.create_index("ix_jobs_position", "jobs", ["ledger_position"])
    op.create_index(
        "uq_jobs_account_idempotency_key", "jobs", ["account", "idempotency_key"], unique=True
    )
    op.create_index("ix_jobs_quota", "jobs", ["account", "tool", "created_at"])
    op.create_index(
        "ix_jobs_open",
        "jobs",
        ["status", "updated_at"],
        postgresql_where=sa.text("terminal = false"),
        sqlite_where=sa.text("terminal = 0"),
    )

    op.create_table(
        "brakes",
        sa.Column("brake_id", sa.String(36), nullable=False),
        sa.Column("scope", sa.String(300), nullable=False),
        sa.Column("active", sa.Boolean(), nullable=False),
        sa.Column("ledger_position", POSITION, nullable=False),
        sa.Column("view", JSON, nullable=False),
        sa.PrimaryKeyConstraint("brake_id", name="pk_brakes"),
    )
    op.create_index("ix_brakes_active", "brakes", ["active"])

    op.create_table(
        "tokens",
        sa.Column("token_id", sa.String(36), nullable=False),
        sa.Column("account", sa.String(100), nullable=False),
        sa.Column("role", sa.String(16), nullable=False),
        sa.Column("token_hash", sa.String(64), nullable=False),
        sa.Column("revoked", sa.Boolean(), nullable=False),
        sa.Column("ledger_position", POSITION, nullable=False),
        sa.Column("view", JSON, nullable=False),
        sa.PrimaryKeyConstraint("token_id", name="pk_tokens"),
    )
    op.create_index("uq_tokens_token_hash", "tokens", ["token_hash"], unique=True)

    for statement in POSTGRES_IMMUTABILITY if _postgres() else SQLITE_IMMUTABILITY:
        op.execute(statement)


def downgrade() -> None:
    for statement in POSTGRES_IMMUTABILITY_DOWN if _postgres() else SQLITE_IMMUTABILITY_DOWN:
        op.execute(statement)
    op.drop_table("tokens")
    op.drop_table("brakes")
    op.drop_table("jobs")
    op.drop_table("events")

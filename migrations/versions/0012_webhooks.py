"""Webhooks: the read model of the webhook streams (who registered which URL for an
account's terminal outcomes), and the deliveries' operational state: the relay's cursor over
the terminal events, one row per webhook and outcome event (the claim), every attempt.

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-02
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None

_JSON = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")
_POSITION = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
_TIME = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "webhooks",
        sa.Column("webhook_id", sa.String(36), nullable=False),
        sa.Column("account", sa.String(100), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("ledger_position", _POSITION, nullable=False),
        sa.Column("view", _JSON, nullable=False),
        sa.PrimaryKeyConstraint("webhook_id", name="pk_webhooks"),
    )
    op.create_index("ix_webhooks_account", "webhooks", ["account"])
    op.create_table(
        "webhook_cursor",
        sa.Column("name", sa.String(64), nullable=False),
        sa.Column("position", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("name", name="pk_webhook_cursor"),
    )
    op.create_table(
        "webhook_deliveries",
        sa.Column("webhook_id", sa.String(36), nullable=False),
        sa.Column("event_id", sa.String(36), nullable=False),
        sa.Column("job_id", sa.String(36), nullable=False),
        sa.Column("position", sa.BigInteger(), nullable=False),
        sa.Column("body", sa.Text(), nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("created_at", _TIME, nullable=False),
        sa.Column("next_attempt_at", _TIME, nullable=False),
        sa.Column("first_attempt_at", _TIME, nullable=True),
        sa.Column("delivered_at", _TIME, nullable=True),
        sa.Column("last_status", sa.Integer(), nullable=True),
        sa.Column("last_error", sa.String(500), nullable=True),
        sa.Column("claimed_by", sa.String(200), nullable=True),
        sa.Column("claimed_until", _TIME, nullable=True),
        sa.PrimaryKeyConstraint("webhook_id", "event_id", name="pk_webhook_deliveries"),
    )
    op.create_index("ix_webhook_deliveries_due", "webhook_deliveries", ["state", "next_attempt_at"])
    op.create_index(
        "ix_webhook_deliveries_webhook_position", "webhook_deliveries", ["webhook_id", "position"]
    )
    op.create_table(
        "webhook_attempts",
        sa.Column("attempt_id", _POSITION, autoincrement=True, nullable=False),
        sa.Column("webhook_id", sa.String(36), nullable=False),
        sa.Column("event_id", sa.String(36), nullable=False),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.Column("at", _TIME, nullable=False),
        sa.Column("duration_ms", sa.Float(), nullable=False),
        sa.Column("status", sa.Integer(), nullable=True),
        sa.Column("error", sa.String(500), nullable=True),
        sa.Column("relay", sa.String(200), nullable=False),
        sa.PrimaryKeyConstraint("attempt_id", name="pk_webhook_attempts"),
    )
    op.create_index("ix_webhook_attempts_delivery", "webhook_attempts", ["webhook_id", "event_id"])


def downgrade() -> None:
    op.drop_table("webhook_attempts")
    op.drop_table("webhook_deliveries")
    op.drop_table("webhook_cursor")
    op.drop_table("webhooks")

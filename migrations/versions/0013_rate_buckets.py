"""Per-account submit buckets (ledger.fairness, docs/fairness.md): one row per account that
submits while a rate limit is set, refilled and taken by one statement, shared by every API
process (operational state, like leases: no event, no read model).

Revision ID: 0013
Revises: 0012
Create Date: 2026-12-02
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "rate_buckets",
        sa.Column("account", sa.String(100), nullable=False),
        sa.Column("tokens", sa.Double(), nullable=False),
        sa.Column("at", sa.Double(), nullable=False),
        sa.Column("granted", sa.Boolean(), nullable=False),
        sa.PrimaryKeyConstraint("account", name="pk_rate_buckets"),
    )


def downgrade() -> None:
    op.drop_table("rate_buckets")

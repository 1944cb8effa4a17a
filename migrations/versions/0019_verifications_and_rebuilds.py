"""Recorded verifications and an online rebuild's progress.

- `verifications`: each `outcomes audit verify` that ran to its end records the range it
  checked, what it counted, its outcome (ok, or how many problems and the first one's line),
  when, by whom and whether against a digest. The console, `outcomes status` and /metrics
  show the last one; the API never verifies. The application role may insert, never change.
- `read_model_rebuild`: one row, where `outcomes rebuild` stands (the last stream whose rows
  it committed), written with each page so that a stopped rebuild resumes there.

Revision ID: 0019
Revises: 0018
Create Date: 2026-12-09
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0019"
down_revision = "0018"
branch_labels = None
depends_on = None

_POSITION = sa.BigInteger().with_variant(sa.Integer(), "sqlite")  # INTEGER PRIMARY KEY = rowid
_TIME = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "verifications",
        sa.Column("id", _POSITION, autoincrement=True, nullable=False),
        sa.Column("started_at", _TIME, nullable=False),
        sa.Column("finished_at", _TIME, nullable=False),
        sa.Column("first_position", sa.BigInteger(), nullable=True),
        sa.Column("last_position", sa.BigInteger(), nullable=True),
        sa.Column("events", sa.BigInteger(), nullable=False),
        sa.Column("streams", sa.BigInteger(), nullable=False),
        sa.Column("ok", sa.Boolean(), nullable=False),
        sa.Column("problems", sa.BigInteger(), nullable=False),
        sa.Column("first_problem", sa.Text(), nullable=True),
        sa.Column("verified_by", sa.String(200), nullable=False),
        sa.Column("with_digest", sa.Boolean(), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_verifications"),
        sqlite_autoincrement=True,
    )
    op.create_table(
        "read_model_rebuild",
        sa.Column("id", sa.Integer(), autoincrement=False, nullable=False),
        sa.Column("run_id", sa.String(36), nullable=False),
        sa.Column("started_at", _TIME, nullable=False),
        sa.Column("updated_at", _TIME, nullable=False),
        sa.Column("finished_at", _TIME, nullable=True),
        sa.Column("after_stream", sa.String(200), nullable=True),
        sa.Column("streams", sa.BigInteger(), nullable=False),
        sa.Column("events", sa.BigInteger(), nullable=False),
        sa.Column("inserted", sa.BigInteger(), nullable=False),
        sa.Column("updated", sa.BigInteger(), nullable=False),
        sa.Column("deleted", sa.BigInteger(), nullable=False),
        sa.CheckConstraint("id = 1", name="ck_read_model_rebuild_one_row"),
        sa.PrimaryKeyConstraint("id", name="pk_read_model_rebuild"),
    )


def downgrade() -> None:
    op.drop_table("read_model_rebuild")
    op.drop_table("verifications")

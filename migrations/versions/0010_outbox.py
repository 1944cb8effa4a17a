"""The outbox: which job's message the broker confirmed, under which queue epoch, and each
queue's current epoch (operational state, like leases: no event, no read model); and an
index for counting re-dispatches by their evidence.

An accepted decision is its own outbox record; these tables say which of them the broker has
confirmed, so that any process's relay can publish the rest, and so that a queue that lost its
marker (deleted, re-created, wiped) is evidence that the messages confirmed under its old epoch
are gone (ledger.runtime.outbox, ledger.runtime.queue_epoch).

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "dispatches",
        sa.Column("job_id", sa.String(36), nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("epoch", sa.String(64), nullable=True),
        sa.Column("confirmed_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("rejected", sa.String(500), nullable=True),
        sa.Column("rejected_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("rejected_version", sa.Integer(), nullable=True),
        sa.PrimaryKeyConstraint("job_id", name="pk_dispatches"),
    )
    op.create_table(
        "queue_epochs",
        sa.Column("queue", sa.String(200), nullable=False),
        sa.Column("epoch", sa.String(64), nullable=False),
        sa.Column("since", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("queue", name="pk_queue_epochs"),
    )
    redispatched = sa.text("type = 'job.redispatched'")
    op.create_index(
        "ix_events_redispatched",
        "events",
        ["position"],
        postgresql_where=redispatched,
        sqlite_where=redispatched,
    )


def downgrade() -> None:
    op.drop_index("ix_events_redispatched", table_name="events")
    op.drop_table("queue_epochs")
    op.drop_table("dispatches")

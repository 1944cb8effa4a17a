"""Indexes for the console's reads: jobs by status and by code, newest first (the filtered
lists, the counts by status, silence and the jobs each brake held), so that a page reads an
index range instead of every job.

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-01
"""

from __future__ import annotations

from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index("ix_jobs_status_position", "jobs", ["status", "ledger_position"])
    op.create_index("ix_jobs_code_position", "jobs", ["code", "ledger_position"])


def downgrade() -> None:
    op.drop_index("ix_jobs_code_position", table_name="jobs")
    op.drop_index("ix_jobs_status_position", table_name="jobs")

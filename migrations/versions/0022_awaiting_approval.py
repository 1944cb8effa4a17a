"""A job's status may be `awaiting_approval` (docs/approvals.md): 17 characters, one more than
the `status` columns held. On Postgres `jobs` (and its partitions), `job_counts`,
`job_counts_hourly` and `job_count_deltas` take up to 32; a longer varchar rewrites nothing.
SQLite does not enforce a declared length: its tables keep their DDL.

Revision ID: 0022
Revises: 0021
Create Date: 2026-12-11
"""

from __future__ import annotations

from alembic import op

revision = "0022"
down_revision = "0021"
branch_labels = None
depends_on = None

TABLES = ("jobs", "job_counts", "job_counts_hourly", "job_count_deltas")
# The kept counts' update trigger names `status` in its WHEN: dropped around the change and
# made again exactly as 0020 made it.
NOT_RECOUNTING = "current_setting('outcomes.recounting', true) IS DISTINCT FROM 'on'"
KEY = ("account", "tool", "accepted", "status", "code", "created_at")
GROUP_CHANGED = (
    f"({', '.join('OLD.' + c for c in KEY)}) IS DISTINCT FROM "
    f"({', '.join('NEW.' + c for c in KEY)})"
)
COUNTED_UPDATE = (
    "CREATE TRIGGER jobs_counted_update AFTER UPDATE ON jobs FOR EACH ROW "
    f"WHEN ({GROUP_CHANGED} AND {NOT_RECOUNTING}) EXECUTE FUNCTION outcomes_count_job()"
)


def _status_length(length: int) -> None:
    op.execute("DROP TRIGGER jobs_counted_update ON jobs")
    for table in TABLES:
        op.execute(f"ALTER TABLE {table} ALTER COLUMN status TYPE varchar({length})")
    op.execute(COUNTED_UPDATE)


def upgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        _status_length(32)


def downgrade() -> None:
    # Fails while a row says `awaiting_approval`: decide or expire parked jobs first.
    if op.get_bind().dialect.name == "postgresql":
        _status_length(16)

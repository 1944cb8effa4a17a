"""Kept counts: a job's change of status is one delta row, not two.

A job's claim and its outcome each change its status, and each change wrote two rows of
`job_count_deltas` (-1 for the group it left, +1 for the one it joined): four of the sixteen
rows an agent's call wrote (bench.agents). A change of status (and code) alone keeps the
hour, account, tool and acceptance, so one row says both sides: +1 to its group and -1 to
`from_status`/`from_code`. Any other change is still two rows (those columns NULL), as is
every insert and delete. The fold (`outcomes_compact_counts()`) and the readers
(ledger/persistence/sql_counts.py) count a row with `from_status` as its two sides.

The migration runs its own snapshot of the counts' functions (`0028_outcomes_counts.sql`:
`migrations/functions/outcomes_counts.sql` as of this revision). SQLite keeps no deltas (its
triggers update the totals): it gets the columns alone, so both schemas stay one.

Revision ID: 0028
Revises: 0027
Create Date: 2026-12-07
"""

from __future__ import annotations

from pathlib import Path

import sqlalchemy as sa
from alembic import op

revision = "0028"
down_revision = "0027"
branch_labels = None
depends_on = None

HERE = Path(__file__).parent


def _columns() -> list[sa.Column[str]]:
    status = sa.String(16).with_variant(sa.String(32), "postgresql")
    return [
        sa.Column("from_status", status, nullable=True),
        sa.Column("from_code", sa.String(64), nullable=True),
    ]


def upgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        # SQLite keeps each table's CREATE text, and an ADD COLUMN edits it in place: the
        # (always empty) table is made again from its declaration, so the text is the schema's.
        with op.batch_alter_table("job_count_deltas", recreate="always") as batch:
            for column in _columns():
                batch.add_column(column)
        return
    for column in _columns():
        op.add_column("job_count_deltas", column)
    op.execute((HERE / "0028_outcomes_counts.sql").read_text())


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        # The old functions cannot read a row with `from_status`: each such row becomes its
        # two sides, as before 0028 (a fold under way elsewhere is waited for: its lock is
        # taken here first, and a fold that starts meanwhile finds it taken).
        op.execute("SELECT pg_advisory_xact_lock(8031453480703915123)")
        op.execute(
            "WITH taken AS (DELETE FROM job_count_deltas WHERE from_status IS NOT NULL"
            " RETURNING hour, account, tool, accepted, status, code, from_status, from_code,"
            " jobs)"
            " INSERT INTO job_count_deltas (hour, account, tool, accepted, status, code, jobs)"
            " SELECT hour, account, tool, accepted, status, code, jobs FROM taken"
            " UNION ALL SELECT hour, account, tool, accepted, from_status, from_code, -jobs"
            " FROM taken"
        )
        op.execute((HERE / "0017_outcomes_counts.sql").read_text())
        op.drop_column("job_count_deltas", "from_code")
        op.drop_column("job_count_deltas", "from_status")
        return
    with op.batch_alter_table("job_count_deltas", recreate="always") as batch:
        batch.drop_column("from_code")
        batch.drop_column("from_status")

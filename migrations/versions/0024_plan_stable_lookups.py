"""Postgres: the append function and the sequencer's tick never scan a table whole.

Both run with `enable_seqscan = off`. Every lookup in them is by a key an index holds (a
stream's head, an event id, a job's idempotency key, the brakes' pulls, the tick's rows), and
PL/pgSQL caches their plans for the session's life. A plan made while the newest partition of
`events` or window of `jobs` was small (just made ahead, or VACUUMed while empty: its
statistics then say zero rows) read that partition whole at each lookup, and went on doing so
as it grew to its full size, until something invalidated the plan. At 1M jobs an agent's call
took 10 ms longer at the median and 2.1x at the p99, and a fill slowed tenfold past 700k jobs
(docs/capacity.md). With the scan refused, the planner takes the index whatever the statistics
say, and a plan cached on an empty partition stays right when it is full.

The migration runs its own snapshots of both files (`0024_outcomes_append_jobs.sql`,
`0024_outcomes_sequence.sql`: `migrations/functions/` as of this revision). Same names,
arguments and results; `CREATE OR REPLACE` keeps the grants.

Revision ID: 0024
Revises: 0023
Create Date: 2026-12-07
"""

from __future__ import annotations

from pathlib import Path

from alembic import op

revision = "0024"
down_revision = "0023"
branch_labels = None
depends_on = None

HERE = Path(__file__).parent


def upgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute((HERE / "0024_outcomes_append_jobs.sql").read_text())
        op.execute((HERE / "0024_outcomes_sequence.sql").read_text())


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute((HERE / "0016_outcomes_append_jobs.sql").read_text())
        op.execute((HERE / "0021_outcomes_sequence.sql").read_text())

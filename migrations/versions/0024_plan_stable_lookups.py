"""Postgres: the append function and the sequencer's tick never scan a table whole.

Both run with `enable_seqscan = off`. Every lookup in them is by a key an index holds (a
stream's head, an event id, a job's idempotency key, the brakes' pulls, the tick's rows), and
PL/pgSQL caches their plans for the session's life. A plan made while the newest partition of
`events` or window of `jobs` was small (just made ahead, or VACUUMed while empty: its
statistics then say zero rows) read that partition whole at each lookup, and went on doing so
as it grew to its full size, until something invalidated the plan. A ledger VACUUMed empty
and grown by 10k calls took an agent's p50 from 15 to 56 ms, and a 1M fill whose VACUUM caught
its newest partition empty went from about 40k jobs a minute to about 1k past 700k
(docs/capacity.md; not the cause of the 1M run's slower calls, which is the partitions'
number). With the scan refused, the planner takes the index whatever the statistics say, and a
plan cached on an empty partition stays right when it is full.

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

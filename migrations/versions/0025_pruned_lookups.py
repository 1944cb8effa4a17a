"""Postgres: the append function's lookups read only the partitions a job's stream can be in.

Each lookup over every partition of `events` descends one index per partition: at 100k jobs in
30 partitions an agent's p99 was 2.1x and 100 jobs' writes 2x the same ledger's in one
partition (docs/capacity.md). `jobs` gains `first_position`, the write position of the job
stream's first event, set by `outcomes_append_jobs` when it writes a job's first event and
never changed; the function then asks the stream's head, its terminal event and its event ids
from there on (Postgres prunes the partitions below), reads a job without a jobs row as a new
stream (a job's events are written with its row), and reads a token's revocation from
`tokens` (written with the token's events) instead of its stream's events, as the agents' job
reads now do too (`loop_reads`): a revocation can be anywhere after the token was made, so its
stream's events were read in every partition at each call. The events cannot be changed by the
application's role, the read model can: a trigger now refuses any row that says "not revoked"
for a token whose events hold its revocation (`tokens_revocation_kept`; no row reads as no
token), so the row answers this question as the events would.
The column is not folded from the view: the read-model check leaves it out, a rebuild leaves it
as it finds it.

The open jobs' rows (the ones still written to) get theirs here; the others keep NULL, which
the function reads as "from position 0": every partition, as before. SQLite gets the column
(one schema for both stores) and never fills it: it has no partitions. Its table is made again
from its declaration (SQLite keeps each table's CREATE text, which the migration tests compare
with the schema's), and the triggers on it, which that drops, are made again as they were.

The sequencer's tick never plans in parallel: over many partitions the planner made its
lookup a parallel one, and starting the workers cost more than the tick (an idle tick at 100k
jobs in 30 partitions: 22.7 ms, 5.7 ms serial), every 5 ms while the ledger is busy. The append
function neither, and it keeps generic plans (the plan cache planned its lookups again at every
call, which cost more than running them).

The migration runs its own snapshots of both files (`0025_outcomes_append_jobs.sql`,
`0025_outcomes_sequence.sql`: `migrations/functions/` as of this revision).

Revision ID: 0025
Revises: 0024
Create Date: 2026-12-07
"""

from __future__ import annotations

from pathlib import Path

import sqlalchemy as sa
from alembic import op

revision = "0025"
down_revision = "0024"
branch_labels = None
depends_on = None

HERE = Path(__file__).parent
COLUMN = "first_position"
# The open jobs' first events: one index range a job (the few still running or waiting).
BACKFILL = (
    "UPDATE jobs j SET first_position = (SELECT min(e.position) FROM events e"
    " WHERE e.stream_id = 'job-' || j.job_id) WHERE NOT j.terminal"
)
# Named as the events' refusal (the store's ImmutableLedgerError): a revocation is history.
# Fired only for a row that says "not revoked" (a token made, a rebuild's repair): rare.
REVOCATION_KEPT = """
CREATE OR REPLACE FUNCTION outcomes_revocation_kept() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM events e WHERE e.stream_id = 'token-' || NEW.token_id
                                        AND e.type = 'token.revoked') THEN
        RAISE EXCEPTION 'token % is revoked and stays so: % refused', NEW.token_id, TG_OP
            USING ERRCODE = 'insufficient_privilege', CONSTRAINT = 'events_append_only',
                  TABLE = TG_TABLE_NAME;
    END IF;
    RETURN NEW;
END $$;
CREATE TRIGGER tokens_revocation_kept BEFORE INSERT OR UPDATE ON tokens FOR EACH ROW
WHEN (NOT NEW.revoked) EXECUTE FUNCTION outcomes_revocation_kept();
"""
TRIGGERS = "SELECT sql FROM sqlite_master WHERE type = 'trigger' AND tbl_name = 'jobs'"


def upgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.add_column("jobs", sa.Column(COLUMN, sa.BigInteger(), nullable=True))
        op.execute(BACKFILL)
        op.execute(REVOCATION_KEPT)
        op.execute((HERE / "0025_outcomes_append_jobs.sql").read_text())
        op.execute((HERE / "0025_outcomes_sequence.sql").read_text())
        return
    with _triggers_kept(), op.batch_alter_table("jobs", recreate="always") as batch:
        batch.add_column(sa.Column(COLUMN, sa.Integer(), nullable=True))


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute((HERE / "0024_outcomes_append_jobs.sql").read_text())
        op.execute((HERE / "0024_outcomes_sequence.sql").read_text())
        op.execute("DROP TRIGGER tokens_revocation_kept ON tokens")
        op.execute("DROP FUNCTION outcomes_revocation_kept()")
        op.drop_column("jobs", COLUMN)
        return
    with _triggers_kept(), op.batch_alter_table("jobs", recreate="always") as batch:
        batch.drop_column(COLUMN)


class _triggers_kept:
    """SQLite: the jobs triggers' text before, made again after the table is."""

    def __enter__(self) -> None:
        self.kept = [str(row[0]) for row in op.get_bind().execute(sa.text(TRIGGERS))]

    def __exit__(self, *failed: object) -> None:
        if failed[0] is None:
            for statement in self.kept:
                op.execute(statement)

"""Postgres: the sequencer's tick looks only in the partitions its events can be in.

A tick asked every partition's txid index for the transactions it had not yet seen, and
planned that lookup over every partition at each tick: at 100k jobs in 33 partitions an idle
tick took 5 ms (2.5 ms of it planning, where an empty ledger's whole tick took 0.9 ms), every
5 ms while the ledger is busy. The tick now keeps a bound, a write position every event it has
not yet sequenced lies above (docs/architecture.md, "The sequencer"): `ledger_ticks` gains
`position_given` (the last write position given out before the tick took its transaction
id), `tick_xid` (that id) and `unsequenced_above` (the bound the next tick reads from). It
rests on a writer taking its transaction id before its first write position, which
`events.position`'s default now makes so (`outcomes_event_position`; defaults run in column
order, and the id's came after the position's). Ticks before this revision's have no bound:
the ticks after it read from 0, every partition, as before, until one keeps a bound.

SQLite gets the columns (one schema for both stores) and never fills them: it orders events
at write.

The partitions' maker waits at most 50 ms for a lock (5 s before): attaching a window of
`jobs` locks its default partition exclusively, and every query on `jobs` queued behind the
request while it waited, so during a rebuild at 1M jobs each attempt stopped every agent's call
for seconds. It gives up and the next call (every 10 s) makes the partition.

The migration runs its own snapshots of the sequencer's and the partitions' functions
(`0026_outcomes_sequence.sql`, `0026_outcomes_partitions.sql`: `migrations/functions/` as of
this revision).

Revision ID: 0026
Revises: 0025
Create Date: 2026-12-07
"""

from __future__ import annotations

from pathlib import Path

import sqlalchemy as sa
from alembic import op

revision = "0026"
down_revision = "0025"
branch_labels = None
depends_on = None

HERE = Path(__file__).parent
COLUMNS = ("position_given", "tick_xid", "unsequenced_above")
# The two functions whose signatures change (CREATE OR REPLACE cannot change them).
OLD_FUNCTIONS = (
    "DROP FUNCTION outcomes_unsequenced(pg_snapshot, pg_snapshot)",
    "DROP FUNCTION outcomes_sequencer_at()",
)
NEW_FUNCTIONS = (
    "DROP FUNCTION outcomes_unsequenced(pg_snapshot, pg_snapshot, bigint)",
    "DROP FUNCTION outcomes_sequencer_at()",
)
POSITION_DEFAULT = "ALTER TABLE events ALTER COLUMN position SET DEFAULT {}"


def upgrade() -> None:
    for name in COLUMNS:
        op.add_column("ledger_ticks", sa.Column(name, sa.BigInteger(), nullable=True))
    if op.get_bind().dialect.name != "postgresql":
        return
    for statement in OLD_FUNCTIONS:
        op.execute(statement)
    op.execute((HERE / "0026_outcomes_sequence.sql").read_text())
    op.execute((HERE / "0026_outcomes_partitions.sql").read_text())
    op.execute(POSITION_DEFAULT.format("outcomes_event_position()"))


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute(POSITION_DEFAULT.format("nextval('events_position_seq'::regclass)"))
        op.execute("DROP FUNCTION outcomes_event_position()")
        for statement in NEW_FUNCTIONS:
            op.execute(statement)
        op.execute((HERE / "0025_outcomes_sequence.sql").read_text())
        op.execute((HERE / "0020_outcomes_partitions.sql").read_text())
    for name in reversed(COLUMNS):
        op.drop_column("ledger_ticks", name)

"""The sequencer's tick: only the events it may sequence, and no row rewritten per tick.

Two faults of 0014's tick, both found by bench.throughput's sequencing lag under load:

- `outcomes_unsequenced` was a SQL function whose one query asked for the transactions past
  the last tick's snapshot OR in progress in it. Planned for any snapshot (as a function's body
  is) and with the OR, it scanned the whole `events` table at every tick, so ticks grew slower
  as the ledger grew. It now runs two ranges of `ix_events_txid`, planned with the snapshot's
  values.
- Each tick updated the one `ledger_sequencer` row. While any transaction is held open, none
  of those dead versions can be pruned, and every tick (and every reader of the state) walked
  them all. A tick that gives positions now inserts its state into `ledger_ticks` (and removes
  the row a hundred ticks older, by its key); the newest row is where the sequencer stands
  (`outcomes_sequencer_at()`), and `ledger_sequencer` keeps what 0014 left there, which is
  where a ledger with no tick row yet stands, and `dense_from`.

The functions are migrations/functions/outcomes_sequence.sql, snapshotted as
0015_outcomes_sequence.sql; `outcomes_sequence` answers as before.

Revision ID: 0015
Revises: 0014
Create Date: 2026-12-02
"""

from __future__ import annotations

from pathlib import Path

import sqlalchemy as sa
from alembic import op

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None

HERE = Path(__file__).parent

# Back to one row: the newest tick's state is where 0014's tick goes on from.
STATE_BACK = """
UPDATE ledger_sequencer s
   SET ticks = a.tick, head = a.head, head_hash = a.head_hash, snapshot = a.snapshot::text,
       ticked_at = a.ticked_at
  FROM outcomes_sequencer_at() a
 WHERE s.id = 1
"""


def upgrade() -> None:
    op.create_table(
        "ledger_ticks",
        sa.Column("tick", sa.BigInteger(), nullable=False, autoincrement=False),
        sa.Column("head", sa.BigInteger(), nullable=False),
        sa.Column("head_hash", sa.String(64), nullable=True),
        sa.Column("snapshot", sa.Text(), nullable=False),
        sa.Column("ticked_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("tick", name="pk_ledger_ticks"),
    )
    if op.get_bind().dialect.name == "postgresql":
        op.execute((HERE / "0015_outcomes_sequence.sql").read_text())


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute(STATE_BACK)
        op.execute((HERE / "0014_outcomes_sequence.sql").read_text())
        op.execute("DROP FUNCTION outcomes_sequencer_at()")
    op.drop_table("ledger_ticks")

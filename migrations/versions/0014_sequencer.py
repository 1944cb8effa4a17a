"""The sequencer: on Postgres, writers commit without a ledger-wide lock, and ledger order is
given after commit.

Until 0013 every Postgres append held one advisory lock through its commit, so that positions
were handed out in commit order and each event's `ledger_hash` could link to the newest one.
That lock, held through each commit's WAL flush, capped every writer together. From here:

- `events.txid` (Postgres only): the writing transaction's id, by default. The sequencer finds
  the events of the transactions that committed since its last tick with it (`ix_events_txid`).
- `ledger_order`: one row per sequenced event: its dense ledger position, the event's row
  (`event_position`, the position it took at insert) and its ledger-wide link. Append-only, as
  `events` is. `ledger_sequencer`: the one row saying where the sequencer stands (the last
  tick's snapshot, the head position and link, from which position positions are dense).
- `ledger_events`: the view every reader in ledger order reads (the changes feed, digests,
  verify, the webhook relay, the counts): each sequenced event with its ledger position and
  link. On SQLite, where writers are serialized and the store links each event as it writes it
  ("sequenced at write"), the view is `events` itself.
- `outcomes_sequence(wait)`: one tick, and `outcomes_unsequenced`, what a tick would take
  (migrations/functions/outcomes_sequence.sql); the
  append function (0014_outcomes_append_jobs.sql) takes per-stream and per-key locks instead of
  the ledger-wide one. The trigger that linked rows at insert is gone.

The events recorded before this migration are sequenced at their own positions with their own
links, so digests taken before it still verify; positions are dense from the first one the
sequencer gives (`ledger_sequencer.dense_from`).

Revision ID: 0014
Revises: 0013
Create Date: 2026-12-02
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

import sqlalchemy as sa
from alembic import op

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None

HERE = Path(__file__).parent
APPEND_FUNCTION = HERE / "0014_outcomes_append_jobs.sql"
SEQUENCE_FUNCTION = HERE / "0014_outcomes_sequence.sql"

EVENT_COLUMNS = (
    "stream_id, stream_version, event_id, type, data, code, actor, recorded_at, prev_hash, hash"
)
POSTGRES_VIEW = f"""
CREATE VIEW ledger_events AS
SELECT o.position, {", ".join("e." + c.strip() for c in EVENT_COLUMNS.split(","))},
       o.ledger_hash, e.position AS write_position
  FROM ledger_order o JOIN events e ON e.position = o.event_position
"""
SQLITE_VIEW = f"""
CREATE VIEW ledger_events AS
SELECT position, {EVENT_COLUMNS}, ledger_hash, position AS write_position FROM events
"""
# The same key as ledger.persistence.locks.key_for: the first 8 bytes of sha256 over the parts
# joined by U+001F, as a signed big-endian integer.
LOCK_KEY_FUNCTION = """
CREATE OR REPLACE FUNCTION outcomes_lock_key(p_parts text[]) RETURNS bigint
LANGUAGE sql IMMUTABLE AS $$
    SELECT ('x' || substr(encode(sha256(convert_to(array_to_string(p_parts, chr(31)),
                                                   'UTF8')), 'hex'), 1, 16))::bit(64)::bigint
$$
"""
ORDER_IMMUTABLE = [
    "CREATE TRIGGER ledger_order_no_update_delete BEFORE UPDATE OR DELETE ON ledger_order "
    "FOR EACH ROW EXECUTE FUNCTION outcomes_events_immutable()",
    "CREATE TRIGGER ledger_order_no_truncate BEFORE TRUNCATE ON ledger_order "
    "FOR EACH STATEMENT EXECUTE FUNCTION outcomes_events_immutable()",
]
BACKFILL = """
INSERT INTO ledger_order (position, event_position, ledger_hash, sequenced_at)
SELECT e.position, e.position, e.ledger_hash, e.recorded_at FROM events e ORDER BY e.position
"""
START = """
INSERT INTO ledger_sequencer (id, snapshot, head, head_hash, dense_from, ticks, ticked_at)
SELECT 1, pg_current_snapshot()::text, coalesce(max(o.position), 0),
       (SELECT o2.ledger_hash FROM ledger_order o2 ORDER BY o2.position DESC LIMIT 1),
       coalesce(max(o.position), 0) + 1, 0, clock_timestamp()
  FROM ledger_order o
"""


def _migration(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"outcomes_migration_{name[:4]}", HERE / name)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _tables() -> None:
    op.create_table(
        "ledger_order",
        sa.Column(
            "position",
            sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
            nullable=False,
            autoincrement=False,
        ),
        sa.Column("event_position", sa.BigInteger(), nullable=False),
        sa.Column("ledger_hash", sa.String(64), nullable=False),
        sa.Column("sequenced_at", sa.DateTime(timezone=True), nullable=False),
        sa.CheckConstraint("position > 0", name="ck_ledger_order_position_positive"),
        sa.PrimaryKeyConstraint("position", name="pk_ledger_order"),
    )
    op.create_index(
        "uq_ledger_order_event_position", "ledger_order", ["event_position"], unique=True
    )
    op.create_table(
        "ledger_sequencer",
        sa.Column("id", sa.Integer(), nullable=False, autoincrement=False),
        sa.Column("snapshot", sa.Text(), nullable=False),
        sa.Column("head", sa.BigInteger(), nullable=False),
        sa.Column("head_hash", sa.String(64), nullable=True),
        sa.Column("dense_from", sa.BigInteger(), nullable=False),
        sa.Column("ticks", sa.BigInteger(), nullable=False),
        sa.Column("ticked_at", sa.DateTime(timezone=True), nullable=False),
        sa.CheckConstraint("id = 1", name="ck_ledger_sequencer_one_row"),
        sa.PrimaryKeyConstraint("id", name="pk_ledger_sequencer"),
    )


def upgrade() -> None:
    _tables()
    if op.get_bind().dialect.name != "postgresql":
        op.execute(SQLITE_VIEW)
        return
    op.execute("ALTER TABLE events ADD COLUMN txid xid8")
    op.execute("ALTER TABLE events ALTER COLUMN txid SET DEFAULT pg_current_xact_id()")
    op.execute("CREATE INDEX ix_events_txid ON events (txid)")
    op.execute("DROP TRIGGER events_ledger_chain ON events")
    for statement in ORDER_IMMUTABLE:
        op.execute(statement)
    op.execute(BACKFILL)
    op.execute(START)
    op.execute(POSTGRES_VIEW)
    op.execute(LOCK_KEY_FUNCTION)
    op.execute(SEQUENCE_FUNCTION.read_text())
    op.execute(APPEND_FUNCTION.read_text())


# The chain in position order over the rows written without a link (0005's backfill, for the
# rows this migration's writers left unlinked), so the ledger verifies as 0013 reads it.
RELINK = """
DO $$
DECLARE
    r record;
    prev text;
BEGIN
    FOR r IN SELECT position, hash, ledger_hash FROM events ORDER BY position LOOP
        IF r.ledger_hash IS NULL THEN
            prev := encode(sha256(convert_to(coalesce(prev, '') || ':' || r.hash, 'UTF8')),
                           'hex');
            UPDATE events SET ledger_hash = prev WHERE position = r.position;
        ELSE
            prev := r.ledger_hash;
        END IF;
    END LOOP;
END $$
"""


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute("DROP VIEW ledger_events")
        op.execute("DROP FUNCTION outcomes_sequence(boolean)")
        op.execute("DROP FUNCTION outcomes_unsequenced(pg_snapshot, pg_snapshot)")
        op.execute((HERE / "0011_outcomes_append_jobs.sql").read_text())
        op.execute("DROP FUNCTION outcomes_lock_key(text[])")
        op.execute("ALTER TABLE events DISABLE TRIGGER events_no_update_delete")
        op.execute(RELINK)
        op.execute("ALTER TABLE events ENABLE TRIGGER events_no_update_delete")
        op.execute(
            _migration("0008_append_cpu.py").TRIGGER.format(when="WHEN (NEW.ledger_hash IS NULL) ")
        )
        op.execute("DROP INDEX ix_events_txid")
        op.execute("ALTER TABLE events DROP COLUMN txid")
    else:
        op.execute("DROP VIEW ledger_events")
    op.drop_table("ledger_sequencer")
    op.drop_table("ledger_order")

"""Partitions and archives: `events` and `ledger_order` partitioned by write position, and the
tables an archive leaves behind.

- Postgres: `events` becomes a table partitioned by range of `position` (the write position),
  and `ledger_order` by range of `event_position`, with the same bounds (`ledger_partitions`
  lists them), so a range's events and their order rows leave together (`outcomes archive`).
  Partitions are made ahead of the writers by `outcomes_make_partitions(ahead)`
  (migrations/functions/outcomes_partitions.sql, snapshotted as 0018_outcomes_partitions.sql),
  a function the application role may call and that runs as the owner. The rows of an existing
  ledger are moved into the partitions here, in position order; the sequence, the append-only
  triggers, the indexes that hold the partition key (`pk_events`,
  `uq_ledger_order_event_position`) and the others (`ix_events_*`) are on the parents; the
  three unique rules that cannot be global (stream version, event id, one terminal event) are
  each partition's unique indexes, and the writers check them across partitions under the
  stream's lock (docs/integrity.md). `ledger_order`'s own position is unique within each
  partition; the sequencer gives it once (its ticks exclude each other).
- Both dialects: `ledger_meta.partition_size` (OUTCOMES_PARTITION_SIZE at the first migration,
  1,000,000 by default; SQLite archives by the same ranges, kept virtual), `archives` (each
  archive made: its ranges, counts, the ledger-wide hash at its end and its manifest) and
  `archived_jobs` (each archived job's id, account and archive: what a read of it answers).

Revision ID: 0018
Revises: 0017
Create Date: 2026-12-04
"""

from __future__ import annotations

import os
from pathlib import Path

import sqlalchemy as sa
from alembic import op

revision = "0018"
down_revision = "0017"
branch_labels = None
depends_on = None

HERE = Path(__file__).parent
PARTITIONS_FUNCTION = HERE / "0018_outcomes_partitions.sql"
DEFAULT_PARTITION_SIZE = 1_000_000
AHEAD = 2  # partitions made above the newest write position (the sequencer keeps it so)

EVENT_COLUMNS = (
    "position, stream_id, stream_version, event_id, type, data, code, actor, recorded_at, "
    "prev_hash, hash, ledger_hash, txid"
)
ORDER_COLUMNS = "position, event_position, ledger_hash, sequenced_at"
TERMINAL = (
    "type IN ('job.outcome_missing', 'job.refused', 'work.declined', 'work.failed', "
    "'work.halted', 'work.partial', 'work.succeeded')"
)
OLD_EVENT_INDEXES = (
    "uq_events_stream_version",
    "uq_events_event_id",
    "uq_events_one_terminal",
    "ix_events_brake_pulls",
    "ix_events_redispatched",
    "ix_events_txid",
)
EVENTS = """
CREATE TABLE events (
    position bigint NOT NULL DEFAULT nextval('events_position_seq'::regclass),
    stream_id varchar(200) NOT NULL,
    stream_version integer NOT NULL,
    event_id uuid NOT NULL,
    type varchar(64) NOT NULL,
    data jsonb NOT NULL,
    code varchar(64),
    actor varchar(200) NOT NULL,
    recorded_at timestamptz NOT NULL,
    prev_hash varchar(64),
    hash varchar(64) NOT NULL,
    ledger_hash varchar(64),
    txid xid8 DEFAULT pg_current_xact_id(),
    CONSTRAINT pk_events PRIMARY KEY (position),
    CONSTRAINT ck_events_position_positive CHECK (position > 0)
) PARTITION BY RANGE (position)
"""
EVENT_INDEXES = [
    "CREATE INDEX ix_events_brake_pulls ON events (stream_id) WHERE type = 'brake.pulled'",
    "CREATE INDEX ix_events_redispatched ON events (position) WHERE type = 'job.redispatched'",
    "CREATE INDEX ix_events_txid ON events (txid)",
]
ORDER = """
CREATE TABLE ledger_order (
    position bigint NOT NULL,
    event_position bigint NOT NULL,
    ledger_hash varchar(64) NOT NULL,
    sequenced_at timestamptz NOT NULL,
    CONSTRAINT ck_ledger_order_position_positive CHECK (position > 0)
) PARTITION BY RANGE (event_position)
"""
ORDER_UNIQUE = "CREATE UNIQUE INDEX uq_ledger_order_event_position ON ledger_order (event_position)"
IMMUTABLE = [
    "CREATE TRIGGER {t}_no_update_delete BEFORE UPDATE OR DELETE ON {t} "
    "FOR EACH ROW EXECUTE FUNCTION outcomes_events_immutable()",
    "CREATE TRIGGER {t}_no_truncate BEFORE TRUNCATE ON {t} "
    "FOR EACH STATEMENT EXECUTE FUNCTION outcomes_events_immutable()",
]
# 0017's trigger that keeps the reconciler's findings counted: made again on the new table once
# the history is moved (moved rows must not count twice).
FINDINGS_COUNTED = (
    "CREATE TRIGGER events_findings_counted AFTER INSERT ON {t} FOR EACH ROW "
    "WHEN (NEW.actor = 'reconciler' AND NEW.type IN "
    "('job.redispatched', 'work.retry_scheduled', 'job.outcome_missing')) "
    "EXECUTE FUNCTION outcomes_count_finding()"
)
EVENTS_NO_TRIGGER_PREFIX = "events"  # 0001 named the events table's triggers events_no_*
VIEW = """
CREATE VIEW ledger_events AS
SELECT o.position, e.stream_id, e.stream_version, e.event_id, e.type, e.data, e.code, e.actor,
       e.recorded_at, e.prev_hash, e.hash, o.ledger_hash, e.position AS write_position
  FROM ledger_order o JOIN events e ON e.position = o.event_position
"""
FUNCTIONS_DOWN = [
    "DROP FUNCTION IF EXISTS outcomes_make_partitions(integer)",
    "DROP FUNCTION IF EXISTS outcomes_add_partition(bigint, bigint)",
    "DROP FUNCTION IF EXISTS outcomes_partition_guards(text)",
    "DROP FUNCTION IF EXISTS outcomes_partitions_ahead()",
    "DROP FUNCTION IF EXISTS outcomes_written_position()",
]


def partition_size() -> int:
    """OUTCOMES_PARTITION_SIZE, or the default (the first migration fixes the ledger's)."""
    raw = (os.environ.get("OUTCOMES_PARTITION_SIZE") or "").strip()
    if not raw:
        return DEFAULT_PARTITION_SIZE
    size = int(raw)
    if not 10 <= size <= 10**12:
        raise ValueError(f"OUTCOMES_PARTITION_SIZE must be from 10 to 10**12, got {raw!r}")
    return size


def _tables() -> None:
    op.create_table(
        "ledger_partitions",
        sa.Column("lower", sa.BigInteger(), nullable=False, autoincrement=False),
        sa.Column("upper", sa.BigInteger(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("lower", name="pk_ledger_partitions"),
    )
    op.create_table(
        "archives",
        sa.Column("archive_id", sa.Integer(), nullable=False, autoincrement=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("write_from", sa.BigInteger(), nullable=False),
        sa.Column("write_to", sa.BigInteger(), nullable=False),
        sa.Column("ledger_first", sa.BigInteger(), nullable=True),
        sa.Column("ledger_last", sa.BigInteger(), nullable=True),
        sa.Column("ledger_hash", sa.String(64), nullable=True),
        sa.Column("events", sa.BigInteger(), nullable=False),
        sa.Column("jobs", sa.BigInteger(), nullable=False),
        sa.Column("manifest_sha256", sa.String(64), nullable=False),
        sa.Column("manifest", sa.Text(), nullable=False),
        sa.PrimaryKeyConstraint("archive_id", name="pk_archives"),
    )
    op.create_table(
        "archived_jobs",
        sa.Column("job_id", sa.String(36), nullable=False),
        sa.Column("account", sa.String(100), nullable=False),
        sa.Column("archive_id", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("job_id", name="pk_archived_jobs"),
    )
    op.create_index("ix_archived_jobs_archive_id", "archived_jobs", ["archive_id"])


def _postgres_upgrade() -> None:
    op.execute("DROP VIEW ledger_events")
    # The old tables step aside (their index names free), the partitioned ones take their names.
    op.execute("ALTER TABLE events RENAME TO events_0016")
    op.execute("ALTER TABLE events_0016 RENAME CONSTRAINT pk_events TO pk_events_0016")
    for name in OLD_EVENT_INDEXES:
        op.execute(f"ALTER INDEX {name} RENAME TO {name}_0016")
    op.execute("ALTER TABLE ledger_order RENAME TO ledger_order_0016")
    op.execute("ALTER TABLE ledger_order_0016 RENAME CONSTRAINT pk_ledger_order TO pk_lo_0016")
    op.execute("ALTER INDEX uq_ledger_order_event_position RENAME TO uq_lo_event_position_0016")
    op.execute(EVENTS)
    op.execute("ALTER SEQUENCE events_position_seq OWNED BY events.position")
    for statement in EVENT_INDEXES:
        op.execute(statement)
    op.execute(ORDER)
    op.execute(ORDER_UNIQUE)
    for table in ("events", "ledger_order"):
        for statement in IMMUTABLE:
            op.execute(statement.format(t=table))
    op.execute(PARTITIONS_FUNCTION.read_text())
    op.execute(f"SELECT outcomes_make_partitions({AHEAD})")
    # The recorded history, moved in position order: a write position is never given twice.
    op.execute(
        f"INSERT INTO events ({EVENT_COLUMNS}) "
        f"SELECT {EVENT_COLUMNS} FROM events_0016 ORDER BY position"
    )
    op.execute(
        f"INSERT INTO ledger_order ({ORDER_COLUMNS}) "
        f"SELECT {ORDER_COLUMNS} FROM ledger_order_0016 ORDER BY position"
    )
    op.execute("DROP TABLE events_0016")  # its triggers refuse rows, not the table's owner
    op.execute("DROP TABLE ledger_order_0016")
    op.execute(FINDINGS_COUNTED.format(t="events"))
    op.execute(VIEW)


def upgrade() -> None:
    _tables()
    meta = sa.table("ledger_meta", sa.column("key"), sa.column("value"))
    op.bulk_insert(meta, [{"key": "partition_size", "value": str(partition_size())}])
    if op.get_bind().dialect.name == "postgresql":
        _postgres_upgrade()


# --- back to 0017: one plain table each, as 0014 and 0015 left them --------------------------

EVENTS_PLAIN = EVENTS.replace(" PARTITION BY RANGE (position)", "").replace(
    "events (", "events_plain (", 1
)
ORDER_PLAIN = ORDER.replace(" PARTITION BY RANGE (event_position)", "").replace(
    "ledger_order (", "ledger_order_plain (", 1
)


def _postgres_downgrade() -> None:
    op.execute("DROP VIEW ledger_events")
    op.execute(EVENTS_PLAIN.replace("CONSTRAINT pk_events", "CONSTRAINT pk_events_plain"))
    op.execute(ORDER_PLAIN)
    op.execute(
        f"INSERT INTO events_plain ({EVENT_COLUMNS}) "
        f"SELECT {EVENT_COLUMNS} FROM events ORDER BY position"
    )
    op.execute(
        f"INSERT INTO ledger_order_plain ({ORDER_COLUMNS}) "
        f"SELECT {ORDER_COLUMNS} FROM ledger_order ORDER BY position"
    )
    op.execute("ALTER SEQUENCE events_position_seq OWNED BY events_plain.position")
    op.execute("DROP TABLE events")  # its partitions with it
    op.execute("DROP TABLE ledger_order")
    for statement in FUNCTIONS_DOWN:
        op.execute(statement)
    op.execute("ALTER TABLE events_plain RENAME TO events")
    op.execute("ALTER TABLE events RENAME CONSTRAINT pk_events_plain TO pk_events")
    op.execute("ALTER TABLE ledger_order_plain RENAME TO ledger_order")
    op.execute("ALTER TABLE ledger_order ADD CONSTRAINT pk_ledger_order PRIMARY KEY (position)")
    op.execute("CREATE UNIQUE INDEX uq_events_stream_version ON events (stream_id, stream_version)")
    op.execute("CREATE UNIQUE INDEX uq_events_event_id ON events (event_id)")
    op.execute(f"CREATE UNIQUE INDEX uq_events_one_terminal ON events (stream_id) WHERE {TERMINAL}")
    for statement in EVENT_INDEXES:
        op.execute(statement)
    op.execute(ORDER_UNIQUE)
    for table in ("events", "ledger_order"):
        for statement in IMMUTABLE:
            op.execute(statement.format(t=table))
    op.execute(FINDINGS_COUNTED.format(t="events"))
    op.execute(VIEW)


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        _postgres_downgrade()
    op.execute("DELETE FROM ledger_meta WHERE key = 'partition_size'")
    op.drop_index("ix_archived_jobs_archive_id", table_name="archived_jobs")
    op.drop_table("archived_jobs")
    op.drop_table("archives")
    op.drop_table("ledger_partitions")

"""The jobs read model partitioned by creation time, so that an archive drops it whole.

`events` and `ledger_order` are partitioned since 0018 and an archive drops their partitions,
but the archived jobs' rows of `jobs` (the largest table, about 5 KB a job with its indexes and
the dead versions its status updates leave) were deleted row by row, and Postgres does not give
deleted space back: the database barely shrank.

- Postgres: `jobs` becomes a table partitioned by range of `job_id`, whose collation is "C"
  (byte order, the same in every locale). Job ids are UUIDv7 (ledger/uuid7.py): their text
  begins with the creation time in milliseconds, so a range of ids is a window of creation time.
  Windows are `ledger_meta.jobs_partition_ms` long (OUTCOMES_JOBS_PARTITION_HOURS at this
  migration, 24 by default; fixed for the ledger, like the events' partition size) and made
  ahead by the same owner's maintenance that makes the events' partitions
  (`outcomes_make_partitions(ahead)`: `outcomes migrate`, the sequencer's leader), never on the
  write path; `jobs_partitions` lists them. Ids no window takes — random v4 ids made before
  UUIDv7 — fall in three fixed partitions: `jobs_legacy_low` (below the first window),
  `jobs_legacy_high` (from '04', the year 2109 in UUIDv7 time, past which no window is made) and
  `jobs_default` (DEFAULT: the v4 ids between, about 1% of them, and any id made while no
  window was there). The rows of an existing ledger are moved here; the first window starts
  at the oldest v7 id (at most 400 windows back), so a ledger that already made v7 ids gets
  windows for them. The primary key holds the partition key; the idempotency key's unique
  index cannot, so it is each partition's (`<partition>_idempotency`), and the writers check
  it across partitions under the key's lock, as they do already (docs/integrity.md). The kept
  counts' triggers (0017) are made again on the new table once the rows are moved.
- Both dialects: `ledger_meta.jobs_partition_ms` and the `jobs_partitions` list (empty on
  SQLite, whose archives delete rows).

Revision ID: 0020
Revises: 0019
Create Date: 2026-12-11
"""

from __future__ import annotations

import os
from pathlib import Path

import sqlalchemy as sa
from alembic import op

revision = "0020"
down_revision = "0019"
branch_labels = None
depends_on = None

HERE = Path(__file__).parent
PARTITIONS_FUNCTIONS = HERE / "0020_outcomes_partitions.sql"
PREVIOUS_FUNCTIONS = HERE / "0018_outcomes_partitions.sql"
DEFAULT_HOURS = 24.0
AHEAD = 2  # windows made past the current one (the sequencer's leader keeps more)
BACK = 400  # at most this many windows made for v7 ids older than the migration
LEGACY_HIGH = "04000000-0000"  # UUIDv7 time 0x040000000000 ms: the year 2109

COLUMNS = (
    "job_id, account, tool, status, terminal, accepted, spends, attempts, code, "
    "idempotency_key, ledger_position, created_at, updated_at, lease_expires_at, due_at, view"
)
JOBS = """
CREATE TABLE {name} (
    job_id varchar(36) COLLATE "C" NOT NULL,
    account varchar(100) NOT NULL,
    tool varchar(200) NOT NULL,
    status varchar(16) NOT NULL,
    terminal boolean NOT NULL,
    accepted boolean NOT NULL,
    spends boolean NOT NULL,
    attempts integer NOT NULL,
    code varchar(64),
    idempotency_key varchar(200),
    ledger_position bigint NOT NULL,
    created_at timestamptz NOT NULL,
    updated_at timestamptz NOT NULL,
    lease_expires_at timestamptz,
    due_at timestamptz,
    view jsonb NOT NULL,
    CONSTRAINT {pk} PRIMARY KEY (job_id)
){partitioned}
"""
INDEXES = [
    "CREATE INDEX ix_jobs_account_position ON jobs (account, ledger_position)",
    "CREATE INDEX ix_jobs_position ON jobs (ledger_position)",
    "CREATE INDEX ix_jobs_quota ON jobs (account, tool, created_at)",
    "CREATE INDEX ix_jobs_open ON jobs (status, updated_at) WHERE terminal = false",
    "CREATE INDEX ix_jobs_status_position ON jobs (status, ledger_position)",
    "CREATE INDEX ix_jobs_code_position ON jobs (code, ledger_position)",
    "CREATE INDEX ix_jobs_created_at ON jobs (created_at)",
]
OLD_INDEXES = (
    "ix_jobs_account_position",
    "ix_jobs_position",
    "uq_jobs_account_idempotency_key",
    "ix_jobs_quota",
    "ix_jobs_open",
    "ix_jobs_status_position",
    "ix_jobs_code_position",
    "ix_jobs_created_at",
)
IDEMPOTENCY = (
    "CREATE UNIQUE INDEX uq_jobs_account_idempotency_key ON jobs (account, idempotency_key)"
)
# 0017's triggers, made again once the rows are moved (moved rows must not count twice).
NOT_RECOUNTING = "current_setting('outcomes.recounting', true) IS DISTINCT FROM 'on'"
KEY = ("account", "tool", "accepted", "status", "code", "created_at")
GROUP_CHANGED = (
    f"({', '.join('OLD.' + c for c in KEY)}) IS DISTINCT FROM "
    f"({', '.join('NEW.' + c for c in KEY)})"
)
COUNTED = [
    "CREATE TRIGGER jobs_counted_insert AFTER INSERT ON jobs FOR EACH ROW "
    f"WHEN ({NOT_RECOUNTING}) EXECUTE FUNCTION outcomes_count_job()",
    "CREATE TRIGGER jobs_counted_update AFTER UPDATE ON jobs FOR EACH ROW "
    f"WHEN ({GROUP_CHANGED} AND {NOT_RECOUNTING}) EXECUTE FUNCTION outcomes_count_job()",
    "CREATE TRIGGER jobs_counted_delete AFTER DELETE ON jobs FOR EACH ROW "
    f"WHEN ({NOT_RECOUNTING}) EXECUTE FUNCTION outcomes_count_job()",
]
# The oldest UUIDv7 id's millisecond (version digit 7; from 2020 on, so no v4 id reads as one).
OLDEST_V7 = (
    "SELECT ('x' || lpad(replace(substr(min(job_id COLLATE \"C\"), 1, 13), '-', ''), 16, '0'))"
    "::bit(64)::bigint FROM jobs_0019"
    " WHERE substr(job_id, 15, 1) = '7' AND job_id COLLATE \"C\" >= '01700000-0000'"
)
FUNCTIONS_DOWN = [
    "DROP FUNCTION IF EXISTS outcomes_jobs_partitions_ahead()",
    "DROP FUNCTION IF EXISTS outcomes_make_jobs_partitions(integer)",
    "DROP FUNCTION IF EXISTS outcomes_add_jobs_partition(bigint, bigint)",
    "DROP FUNCTION IF EXISTS outcomes_job_id_bound(bigint)",
]


def partition_ms() -> int:
    """OUTCOMES_JOBS_PARTITION_HOURS (may be fractional), or a day, in milliseconds."""
    raw = (os.environ.get("OUTCOMES_JOBS_PARTITION_HOURS") or "").strip()
    hours = float(raw) if raw else DEFAULT_HOURS
    if not 0.001 <= hours <= 24 * 366:
        raise ValueError(f"OUTCOMES_JOBS_PARTITION_HOURS must be from 0.001 to 8784, got {raw!r}")
    return round(hours * 3_600_000)


def _postgres_upgrade(size: int) -> None:
    op.execute("ALTER TABLE jobs RENAME TO jobs_0019")
    op.execute("ALTER TABLE jobs_0019 RENAME CONSTRAINT pk_jobs TO pk_jobs_0019")
    for name in OLD_INDEXES:
        op.execute(f"ALTER INDEX {name} RENAME TO {name}_0019")
    op.execute(JOBS.format(name="jobs", pk="pk_jobs", partitioned=" PARTITION BY RANGE (job_id)"))
    for statement in INDEXES:
        op.execute(statement)
    op.execute(PARTITIONS_FUNCTIONS.read_text())
    bind = op.get_bind()
    now_ms = int(
        bind.execute(sa.text("SELECT floor(extract(epoch FROM now()) * 1000)")).scalar_one()
    )
    first = now_ms // size * size
    oldest = bind.execute(sa.text(OLDEST_V7)).scalar()
    if oldest is not None:
        first = max(min(first, int(oldest) // size * size), first - BACK * size)
    bound = bind.execute(sa.text("SELECT outcomes_job_id_bound(:ms)"), {"ms": first}).scalar()
    for name, values in (
        ("jobs_legacy_low", f"FOR VALUES FROM (MINVALUE) TO ('{bound}')"),
        ("jobs_legacy_high", f"FOR VALUES FROM ('{LEGACY_HIGH}') TO (MAXVALUE)"),
        ("jobs_default", "DEFAULT"),
    ):
        op.execute(f"CREATE TABLE {name} (LIKE jobs INCLUDING DEFAULTS INCLUDING CONSTRAINTS)")
        op.execute(f"SELECT outcomes_partition_guards('{name}')")
        op.execute(f"ALTER TABLE jobs ATTACH PARTITION {name} {values}")
    op.execute(f"SELECT outcomes_add_jobs_partition({first}, {first + size})")
    op.execute(f"SELECT outcomes_make_jobs_partitions({AHEAD})")
    op.execute(f"INSERT INTO jobs ({COLUMNS}) SELECT {COLUMNS} FROM jobs_0019")
    op.execute("DROP TABLE jobs_0019")  # its count triggers with it: the rows are counted
    for statement in COUNTED:
        op.execute(statement)
    # No ANALYZE here: a partition analyzed empty is planned as empty, and a session's cached
    # plan (the append function's idempotency lookup, 0009) would scan it whole as it fills.


def upgrade() -> None:
    size = partition_ms()
    op.create_table(
        "jobs_partitions",
        sa.Column("lower_ms", sa.BigInteger(), nullable=False, autoincrement=False),
        sa.Column("upper_ms", sa.BigInteger(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("dropped_at", sa.DateTime(timezone=True), nullable=True),
        sa.PrimaryKeyConstraint("lower_ms", name="pk_jobs_partitions"),
    )
    meta = sa.table("ledger_meta", sa.column("key"), sa.column("value"))
    op.bulk_insert(meta, [{"key": "jobs_partition_ms", "value": str(size)}])
    if op.get_bind().dialect.name == "postgresql":
        _postgres_upgrade(size)


# --- back to 0019: one plain table, as 0017 left it ------------------------------------------


def _postgres_downgrade() -> None:
    op.execute(JOBS.format(name="jobs_plain", pk="pk_jobs_plain", partitioned=""))
    op.execute('ALTER TABLE jobs_plain ALTER COLUMN job_id TYPE varchar(36) COLLATE "default"')
    op.execute(f"INSERT INTO jobs_plain ({COLUMNS}) SELECT {COLUMNS} FROM jobs")
    op.execute("DROP TABLE jobs")  # its partitions and triggers with it
    for statement in FUNCTIONS_DOWN:
        op.execute(statement)
    op.execute(PREVIOUS_FUNCTIONS.read_text())
    op.execute("ALTER TABLE jobs_plain RENAME TO jobs")
    op.execute("ALTER TABLE jobs RENAME CONSTRAINT pk_jobs_plain TO pk_jobs")
    for statement in [*INDEXES, IDEMPOTENCY, *COUNTED]:
        op.execute(statement)


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        _postgres_downgrade()
    op.execute("DELETE FROM ledger_meta WHERE key = 'jobs_partition_ms'")
    op.drop_table("jobs_partitions")

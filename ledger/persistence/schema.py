"""The ledger's tables, declared once; Alembic's migrations must produce exactly this."""

from __future__ import annotations

from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    CheckConstraint,
    Column,
    DateTime,
    Double,
    Float,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    SmallInteger,
    String,
    Table,
    Text,
    Uuid,
    false,
)
from sqlalchemy.dialects.postgresql import JSONB

from ledger.events import TERMINAL_EVENT_TYPES

metadata = MetaData(
    naming_convention={
        "ix": "ix_%(table_name)s_%(column_0_N_name)s",
        "uq": "uq_%(table_name)s_%(column_0_N_name)s",
        "pk": "pk_%(table_name)s",
    }
)

Json = JSON().with_variant(JSONB(), "postgresql")
Position = BigInteger().with_variant(Integer(), "sqlite")  # INTEGER PRIMARY KEY = rowid
Time = DateTime(timezone=True)

events = Table(
    "events",
    metadata,
    Column("position", Position, primary_key=True, autoincrement=True),
    Column("stream_id", String(200), nullable=False),
    Column("stream_version", Integer, nullable=False),
    Column("event_id", Uuid(), nullable=False),
    Column("type", String(64), nullable=False),
    Column("data", Json, nullable=False),
    Column("code", String(64), nullable=True),
    Column("actor", String(200), nullable=False),
    Column("recorded_at", Time, nullable=False),
    Column("prev_hash", String(64), nullable=True),
    Column("hash", String(64), nullable=False),
    # The ledger-wide chain: this hash linked to the previous position's (ledger.chain).
    Column("ledger_hash", String(64), nullable=True),
    # Readers page from position 0: a row slipped in at 0 or below would go unverified.
    CheckConstraint("position > 0", name="ck_events_position_positive"),
    Index("uq_events_stream_version", "stream_id", "stream_version", unique=True),
    Index("uq_events_event_id", "event_id", unique=True),
    # Positions are never reused, even after the last row is deleted by a superuser.
    sqlite_autoincrement=True,
)

_terminal = events.c.type.in_(sorted(TERMINAL_EVENT_TYPES))
# At most one terminal event per job stream, whatever the writers do.
Index(
    "uq_events_one_terminal",
    events.c.stream_id,
    unique=True,
    postgresql_where=_terminal,
    sqlite_where=_terminal,
)

# Brake checks read pulls from events, not from the brakes read model (it could be edited).
_brake_pull = events.c.type == "brake.pulled"
Index(
    "ix_events_brake_pulls",
    events.c.stream_id,
    postgresql_where=_brake_pull,
    sqlite_where=_brake_pull,
)

# Re-dispatches are rare and counted by their evidence (`outcomes status`, /metrics).
_redispatched = events.c.type == "job.redispatched"
Index(
    "ix_events_redispatched",
    events.c.position,
    postgresql_where=_redispatched,
    sqlite_where=_redispatched,
)

# On Postgres `jobs` is partitioned by range of `job_id` (migration 0020): windows of creation
# time, as UUIDv7 ids begin with it; the ids compare byte by byte (collation "C") in every locale.
JobId = String(36).with_variant(String(36, collation="C"), "postgresql")
# A job's status: `awaiting_approval` (17 characters) needed more than 16 on Postgres
# (migration 0022); SQLite does not enforce a length, and its tables keep their DDL.
StatusText = String(16).with_variant(String(32), "postgresql")

jobs = Table(
    "jobs",
    metadata,
    Column("job_id", JobId, primary_key=True),
    Column("account", String(100), nullable=False),
    Column("tool", String(200), nullable=False),
    Column("status", StatusText, nullable=False),
    Column("terminal", Boolean, nullable=False),
    Column("accepted", Boolean, nullable=False),
    Column("spends", Boolean, nullable=False),
    Column("attempts", Integer, nullable=False),
    Column("code", String(64), nullable=True),
    Column("idempotency_key", String(200), nullable=True),
    Column("ledger_position", Position, nullable=False),
    Column("created_at", Time, nullable=False),
    Column("updated_at", Time, nullable=False),
    Column("lease_expires_at", Time, nullable=True),
    Column("due_at", Time, nullable=True),
    # The whole JobView; the columns above are copies kept for indexes and filters.
    Column("view", Json, nullable=False),
    Index("ix_jobs_account_position", "account", "ledger_position"),
    Index("ix_jobs_position", "ledger_position"),
    Index("uq_jobs_account_idempotency_key", "account", "idempotency_key", unique=True),
    Index("ix_jobs_quota", "account", "tool", "created_at"),
    # The console's lists and counts by status and by code (silence, the jobs a brake held).
    Index("ix_jobs_status_position", "status", "ledger_position"),
    Index("ix_jobs_code_position", "code", "ledger_position"),
    # The partial hours at the ends of a summary's since/until (the whole hours are counted).
    Index("ix_jobs_created_at", "created_at"),
)
# The reconciler's work grows with open jobs, not with the ledger.
Index(
    "ix_jobs_open",
    jobs.c.status,
    jobs.c.updated_at,
    postgresql_where=jobs.c.terminal == false(),
    sqlite_where=jobs.c.terminal == false(),
)

brakes = Table(
    "brakes",
    metadata,
    Column("brake_id", String(36), primary_key=True),
    Column("scope", String(300), nullable=False),
    Column("active", Boolean, nullable=False),
    Column("ledger_position", Position, nullable=False),
    Column("view", Json, nullable=False),
    Index("ix_brakes_active", "active"),
)

tokens = Table(
    "tokens",
    metadata,
    Column("token_id", String(36), primary_key=True),
    Column("account", String(100), nullable=False),
    Column("role", String(16), nullable=False),
    Column("token_hash", String(64), nullable=False),
    Column("revoked", Boolean, nullable=False),
    Column("ledger_position", Position, nullable=False),
    Column("view", Json, nullable=False),
    Index("uq_tokens_token_hash", "token_hash", unique=True),
)

webhooks = Table(
    "webhooks",
    metadata,
    Column("webhook_id", String(36), primary_key=True),
    Column("account", String(100), nullable=False),
    Column("status", String(16), nullable=False),
    Column("ledger_position", Position, nullable=False),
    Column("view", Json, nullable=False),
    Index("ix_webhooks_account", "account"),
)

# Webhook deliveries (operational state, like the outbox's; ledger.services.webhook_relay):
# how far the relay has read the terminal events, one row per webhook and outcome event (the
# claim relays take turns on), and every attempt made, for operators and auditors to read.
webhook_cursor = Table(
    "webhook_cursor",
    metadata,
    Column("name", String(64), primary_key=True),
    Column("position", BigInteger, nullable=False),
)
webhook_deliveries = Table(
    "webhook_deliveries",
    metadata,
    Column("webhook_id", String(36), primary_key=True),
    Column("event_id", String(36), primary_key=True),
    Column("job_id", String(36), nullable=False),
    Column("position", BigInteger, nullable=False),
    Column("body", Text, nullable=False),
    Column("state", String(16), nullable=False),
    Column("attempts", Integer, nullable=False),
    Column("created_at", Time, nullable=False),
    Column("next_attempt_at", Time, nullable=False),
    Column("first_attempt_at", Time, nullable=True),
    Column("delivered_at", Time, nullable=True),
    Column("last_status", Integer, nullable=True),
    Column("last_error", String(500), nullable=True),
    Column("claimed_by", String(200), nullable=True),
    Column("claimed_until", Time, nullable=True),
    Index("ix_webhook_deliveries_due", "state", "next_attempt_at"),
    Index("ix_webhook_deliveries_webhook_position", "webhook_id", "position"),
)
webhook_attempts = Table(
    "webhook_attempts",
    metadata,
    Column("attempt_id", Position, primary_key=True, autoincrement=True),
    Column("webhook_id", String(36), nullable=False),
    Column("event_id", String(36), nullable=False),
    Column("attempt", Integer, nullable=False),
    Column("at", Time, nullable=False),
    Column("duration_ms", Float, nullable=False),
    Column("status", Integer, nullable=True),
    Column("error", String(500), nullable=True),
    Column("relay", String(200), nullable=False),
    Index("ix_webhook_attempts_delivery", "webhook_id", "event_id"),
)

# Leases are operational state, not a read model: heartbeats renew them without an event, and
# a frozen or dead worker stops renewing, which is what the reconciler looks for.
leases = Table(
    "leases",
    metadata,
    Column("job_id", String(36), primary_key=True),
    Column("attempt", Integer, nullable=False),
    Column("worker", String(200), nullable=False),
    Column("expires_at", Time, nullable=False),
    Index("ix_leases_expires_at", "expires_at"),
)

# The outbox (operational state, not a read model; ledger.services.outbox): the message the
# broker confirmed for a job's current wait (the stream version that asked for it) and the
# queue's epoch then; `rejected` is what a worker that took a delivery of the wait at
# `rejected_version` and could not claim it said. Rows of jobs that no longer wait are pruned.
dispatches = Table(
    "dispatches",
    metadata,
    Column("job_id", String(36), primary_key=True),
    Column("version", Integer, nullable=False),
    Column("epoch", String(64), nullable=True),
    Column("confirmed_at", Time, nullable=False),
    Column("rejected", String(500), nullable=True),
    Column("rejected_at", Time, nullable=True),
    Column("rejected_version", Integer, nullable=True),  # the wait the rejection was about
)

# Each queue's current epoch: the mark the broker keeps with the queue (workers.queue_marker).
queue_epochs = Table(
    "queue_epochs",
    metadata,
    Column("queue", String(200), primary_key=True),
    Column("epoch", String(64), nullable=False),
    Column("since", Time, nullable=False),
)

# Each account's submit bucket (ledger.fairness): operational state, like leases, shared by
# every API process. `at` is the database's clock in epoch seconds; `granted` says whether the
# last take found a token (its one statement both refills and takes, and answers both).
rate_buckets = Table(
    "rate_buckets",
    metadata,
    Column("account", String(100), primary_key=True),
    Column("tokens", Double, nullable=False),
    Column("at", Double, nullable=False),
    Column("granted", Boolean, nullable=False),
)

# Ledger order (migration 0014, ledger.services.sequencer): on Postgres writers commit without
# a ledger-wide lock, and the sequencer gives each committed event, after commit, its dense
# ledger position and its ledger-wide link; append-only, as `events` is. SQLite sequences at
# write (its writers are serialized) and leaves both tables empty.
ledger_order = Table(
    "ledger_order",
    metadata,
    Column("position", Position, primary_key=True, autoincrement=False),
    Column("event_position", BigInteger, nullable=False),
    Column("ledger_hash", String(64), nullable=False),
    Column("sequenced_at", Time, nullable=False),
    CheckConstraint("position > 0", name="ck_ledger_order_position_positive"),
    Index("uq_ledger_order_event_position", "event_position", unique=True),
)
# Where the sequencer stood at migration 0015 (the last tick's snapshot, as pg_snapshot text,
# the head position and link; `ledger_ticks` has the newer ticks), and the first position it
# gave (positions are dense from there on).
ledger_sequencer = Table(
    "ledger_sequencer",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=False),
    Column("snapshot", Text, nullable=False),
    Column("head", BigInteger, nullable=False),
    Column("head_hash", String(64), nullable=True),
    Column("dense_from", BigInteger, nullable=False),
    Column("ticks", BigInteger, nullable=False),
    Column("ticked_at", Time, nullable=False),
    CheckConstraint("id = 1", name="ck_ledger_sequencer_one_row"),
)
# Each tick that gave positions: its number, the head position and link after it, and its
# snapshot. The newest is where the sequencer stands; the tick removes the row 100 before its
# own (inserts, never an update: a transaction held open keeps every dead version).
ledger_ticks = Table(
    "ledger_ticks",
    metadata,
    Column("tick", BigInteger, primary_key=True, autoincrement=False),
    Column("head", BigInteger, nullable=False),
    Column("head_hash", String(64), nullable=True),
    Column("snapshot", Text, nullable=False),
    Column("ticked_at", Time, nullable=False),
    # The Merkle tree after the tick (migration 0021): its size and frontier, the roots of its
    # perfect subtrees, largest first, 32 bytes each (None: a tick before 0021).
    Column("tree_size", BigInteger, nullable=True),
    Column("frontier", LargeBinary, nullable=True),
)

# The Merkle tree over ledger order (migration 0021, docs/integrity.md "Proofs"): every
# complete subtree at a level divisible by 4 above the leaves (4, 8, …; ledger.merkle_store;
# a leaf is recomputed from its event, ledger/persistence/sql_tree.py), added
# once and never changed. Leaf i is the event at ledger position `ledger_tree.start_position
# + i`. Postgres: the sequencer's tick extends it; SQLite: each write, under its write lock.
merkle_nodes = Table(
    "merkle_nodes",
    metadata,
    Column("level", SmallInteger, primary_key=True, autoincrement=False),
    Column("idx", BigInteger, primary_key=True, autoincrement=False),
    Column("hash", LargeBinary, nullable=False),
)
# SQLite only (Postgres's ledger positions are dense): from `position` on, `skipped` positions
# after the tree's first hold no leaf (positions a write burned: the leaf of position p is
# p - start_position - the skipped of the last row at or below p). Append-only.
merkle_gaps = Table(
    "merkle_gaps",
    metadata,
    Column("position", BigInteger, primary_key=True, autoincrement=False),
    Column("skipped", BigInteger, nullable=False),
)
# One row: the position of leaf 0, and the tree's size and frontier (Postgres: as migration
# 0020 built it, the ticks keep it since; SQLite: as the last write left it).
ledger_tree = Table(
    "ledger_tree",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=False),
    Column("start_position", BigInteger, nullable=False),
    Column("tree_size", BigInteger, nullable=False),
    Column("frontier", LargeBinary, nullable=False),
    Column("built_at", Time, nullable=False),
    CheckConstraint("id = 1", name="ck_ledger_tree_one_row"),
)

# The view every reader in ledger order reads: each sequenced event, `position` its ledger
# position and `ledger_hash` its link (`write_position`: the row in `events`). On SQLite it is
# `events` itself. A view, so it is declared apart from the tables the migrations must build.
views = MetaData()
ledger_events = Table(
    "ledger_events",
    views,
    Column("position", Position, primary_key=True),
    *(Column(c.name, c.type) for c in events.columns if c.name not in ("position", "ledger_hash")),
    Column("ledger_hash", String(64)),
    Column("write_position", Position),
)

# Kept counts of the jobs read model (migration 0017, ledger/persistence/sql_counts.py): what a
# GROUP BY over `jobs` answers, kept as jobs change, so that a summary, a scrape or a status
# reads groups, never every job. `code` is '' for none (a key column cannot be NULL); `hour` is
# the jobs' creation hour, in whole hours since 1970-01-01 UTC. On Postgres a trigger on `jobs`
# inserts a delta row per change in the writer's transaction (no row every writer updates) and
# `outcomes_compact_counts()` folds them into the totals; readers sum totals and pending deltas
# in one statement. On SQLite (writers serialized) the triggers update the totals directly.
_COUNT_KEY = (
    ("account", String(100)),
    ("tool", String(200)),
    ("accepted", Boolean()),
    ("status", StatusText),
    ("code", String(64)),
)


def _key_columns(*, keyed: bool = True) -> list[Column[Any]]:
    return [Column(name, kind, primary_key=keyed, nullable=False) for name, kind in _COUNT_KEY]


job_counts = Table(
    "job_counts", metadata, *_key_columns(), Column("jobs", BigInteger, nullable=False)
)
job_counts_hourly = Table(
    "job_counts_hourly",
    metadata,
    Column("hour", BigInteger, primary_key=True, autoincrement=False),
    *_key_columns(),
    Column("jobs", BigInteger, nullable=False),
)
# Insert-only (Postgres): each change of a jobs row, -1 for the group it leaves and +1 for the
# one it joins; the compactor deletes what it folds. No key, no index: writers only append.
job_count_deltas = Table(
    "job_count_deltas",
    metadata,
    Column("hour", BigInteger, nullable=False),
    *_key_columns(keyed=False),
    Column("jobs", Integer, nullable=False),
)
# The reconciler's findings (its events of the finding types) by type and cause, and the time
# of the newest: kept by a trigger on `events`, as the job counts are.
finding_counts = Table(
    "finding_counts",
    metadata,
    Column("type", String(64), primary_key=True),
    Column("cause", Text, primary_key=True),
    Column("events", BigInteger, nullable=False),
    Column("last_at", Time, nullable=False),
)
finding_count_deltas = Table(
    "finding_count_deltas",
    metadata,
    Column("type", String(64), nullable=False),
    Column("cause", Text, nullable=False),
    Column("events", Integer, nullable=False),
    Column("last_at", Time, nullable=False),
)

# Partitions (migration 0018, Postgres): each range of write positions [lower, upper) that has
# a partition of `events` and one of `ledger_order` (made ahead by `outcomes_make_partitions`).
# A range leaves the list when it is archived. On Postgres the three unique indexes of `events`
# above and `ledger_order`'s primary key are each partition's (PARTITION_GUARDS): a unique index
# on a partitioned table must hold the partition key (docs/integrity.md).
ledger_partitions = Table(
    "ledger_partitions",
    metadata,
    Column("lower", BigInteger, primary_key=True, autoincrement=False),
    Column("upper", BigInteger, nullable=False),
    Column("created_at", Time, nullable=False),
)
PARTITION_GUARDS = frozenset(
    {
        "uq_events_stream_version",
        "uq_events_event_id",
        "uq_events_one_terminal",
        # `jobs` (0020): one idempotency key per account, in each partition of `jobs`.
        "uq_jobs_account_idempotency_key",
    }
)
PARTITIONED_WITHOUT_PK = frozenset({"ledger_order"})

# The windows of `jobs` (migration 0020, Postgres): each partition made for the job ids of
# [lower_ms, upper_ms) of UUIDv7 time (`jobs_t<lower_ms>`), by `outcomes_make_partitions`;
# `dropped_at` once an archive dropped it (every job in it archived). Ids no window takes fall
# in `jobs_legacy_low`, `jobs_legacy_high` and `jobs_default` (docs/archive.md).
jobs_partitions = Table(
    "jobs_partitions",
    metadata,
    Column("lower_ms", BigInteger, primary_key=True, autoincrement=False),
    Column("upper_ms", BigInteger, nullable=False),
    Column("created_at", Time, nullable=False),
    Column("dropped_at", Time, nullable=True),
)

# Archives (`outcomes archive`, docs/archive.md): each one made, its write and ledger ranges,
# counts, the ledger-wide hash at its last position and its manifest (`state`: "recorded"
# once its files are written and checked, "done" once its rows left the database); and each
# archived job's id, account and archive, which is what a read of it then answers (410).
# Written by the schema owner only: the application role reads them.
archives = Table(
    "archives",
    metadata,
    Column("archive_id", Integer, primary_key=True, autoincrement=False),
    Column("state", String(16), nullable=False),
    Column("created_at", Time, nullable=False),
    Column("write_from", BigInteger, nullable=False),
    Column("write_to", BigInteger, nullable=False),
    Column("ledger_first", BigInteger, nullable=True),
    Column("ledger_last", BigInteger, nullable=True),
    Column("ledger_hash", String(64), nullable=True),
    Column("events", BigInteger, nullable=False),
    Column("jobs", BigInteger, nullable=False),
    Column("manifest_sha256", String(64), nullable=False),
    Column("manifest", Text, nullable=False),
)
archived_jobs = Table(
    "archived_jobs",
    metadata,
    Column("job_id", String(36), primary_key=True),
    Column("account", String(100), nullable=False),
    Column("archive_id", Integer, nullable=False),
    Index("ix_archived_jobs_archive_id", "archive_id"),
)

# Values made once per ledger at migrate (the request fingerprints' HMAC key).
ledger_meta = Table(
    "ledger_meta",
    metadata,
    Column("key", String(64), primary_key=True),
    Column("value", Text, nullable=False),
)
REQUEST_KEY = "request_key"
PARTITION_SIZE_KEY = "partition_size"  # positions per partition (migration 0018)
JOBS_PARTITION_KEY = "jobs_partition_ms"  # a window of `jobs`, in ms (migration 0020)

# Each `outcomes audit verify` that ran to its end records what it checked and what it found
# (migration 0019): the console, `outcomes status` and /metrics show the last one, read by the
# primary key's index, and never verify anything themselves. Insert-only for the application
# role (ledger.persistence.privileges): a record is evidence, not state.
verifications = Table(
    "verifications",
    metadata,
    Column("id", Position, primary_key=True, autoincrement=True),
    Column("started_at", Time, nullable=False),
    Column("finished_at", Time, nullable=False),
    Column("first_position", BigInteger, nullable=True),  # None: the ledger was empty
    Column("last_position", BigInteger, nullable=True),
    Column("events", BigInteger, nullable=False),
    Column("streams", BigInteger, nullable=False),
    Column("ok", Boolean, nullable=False),
    Column("problems", BigInteger, nullable=False),
    Column("first_problem", Text, nullable=True),  # the one line `audit verify` exits with
    Column("verified_by", String(200), nullable=False),
    Column("with_digest", Boolean, nullable=False),
    # full, since or sample (ledger.verification_record.SCOPES; migration 0023)
    Column("scope", String(16), nullable=False, server_default="full"),
    sqlite_autoincrement=True,
)

# Where an online `outcomes rebuild` stands (migration 0019): one row, written in the same
# transaction as each page of read-model rows, so a rebuild stopped anywhere resumes after the
# last stream whose rows it committed.
read_model_rebuild = Table(
    "read_model_rebuild",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=False),
    Column("run_id", String(36), nullable=False),  # the run that owns it (another stops)
    Column("started_at", Time, nullable=False),
    Column("updated_at", Time, nullable=False),
    Column("finished_at", Time, nullable=True),  # None: under way, or stopped part way
    Column("after_stream", String(200), nullable=True),  # the last stream done (None: none)
    Column("streams", BigInteger, nullable=False),
    Column("events", BigInteger, nullable=False),
    Column("inserted", BigInteger, nullable=False),
    Column("updated", BigInteger, nullable=False),
    Column("deleted", BigInteger, nullable=False),
    CheckConstraint("id = 1", name="ck_read_model_rebuild_one_row"),
)

READ_MODEL_TABLES = (jobs, brakes, tokens, webhooks)
# The revision this code reads and writes: a ledger at an older one is not ready (/readyz) until
# `outcomes migrate` runs (tests/persistence/test_migrations.py holds it to Alembic's head).
SCHEMA_REVISION = "0023"


def unique_constraints() -> dict[str, tuple[str, ...]]:
    """Each unique index and primary key by name, with its columns as "table.column"."""
    found: dict[str, tuple[str, ...]] = {}
    for table in metadata.tables.values():
        pk = table.primary_key
        found[f"pk_{table.name}"] = tuple(f"{table.name}.{c.name}" for c in pk.columns)
        for index in table.indexes:
            if index.unique and index.name:
                found[str(index.name)] = tuple(f"{table.name}.{c.name}" for c in index.columns)
    return found


# The triggers report this constraint name, so refusals are told apart without their wording.
APPEND_ONLY_CONSTRAINT = "events_append_only"
# The grants script reports this name when asked to grant to a role that could rewrite history.
APP_ROLE_CONSTRAINT = "outcomes_app_role"

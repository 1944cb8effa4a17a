"""Partitions and archives: the ranges of `events` and windows of `jobs` with a partition,
the unique indexes each partition holds, and the archives made and the jobs they took."""

from __future__ import annotations

from sqlalchemy import (
    BigInteger,
    Column,
    Index,
    Integer,
    String,
    Table,
    Text,
)

from ledger.persistence.schema_metadata import Time, metadata

# Partitions (migration 0018, Postgres): each range of write positions [lower, upper) that has
# a partition of `events` and one of `ledger_order` (made ahead by `outcomes_make_partitions`).
# A range leaves the list when it is archived. On Postgres the three unique indexes of `events`
# (schema_log) and `ledger_order`'s primary key are each partition's (PARTITION_GUARDS): a unique
# index on a partitioned table must hold the partition key (docs/integrity.md).
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

"""Operational state, not read models: webhook deliveries, leases, the outbox's dispatches,
queue epochs, submit buckets, the per-ledger values, the verifications recorded and where an
online rebuild stands."""

from __future__ import annotations

from sqlalchemy import (
    BigInteger,
    Boolean,
    CheckConstraint,
    Column,
    Double,
    Float,
    Index,
    Integer,
    String,
    Table,
    Text,
)

from ledger.persistence.schema_metadata import Position, Time, metadata

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

# The outbox (operational state, not a read model; ledger.runtime.outbox): the message the
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

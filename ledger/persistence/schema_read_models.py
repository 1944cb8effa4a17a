"""The read models: `jobs`, `brakes`, `tokens` and `webhooks`, each row a view folded from
its stream's events (rebuilt from them by `outcomes rebuild`)."""

from __future__ import annotations

from sqlalchemy import (
    Boolean,
    Column,
    Index,
    Integer,
    String,
    Table,
    false,
)

from ledger.persistence.schema_metadata import JobId, Json, Position, StatusText, Time, metadata

# Columns a store keeps for its own lookups, not folded from the events: the read-model check
# and a rebuild leave them out.
NOT_FOLDED = frozenset({"first_position"})

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
    # Not folded from the view: where the job's stream begins (its first event's write
    # position), kept by the Postgres append function so that its lookups read only the
    # partitions from there on (0025), and by `outcomes rebuild` on the rows it writes. NULL
    # where unknown (rows from before 0025 no rebuild rewrote, SQLite): every partition is read.
    Column("first_position", Position, nullable=True),
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

READ_MODEL_TABLES = (jobs, brakes, tokens, webhooks)

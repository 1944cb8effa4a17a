"""Kept counts: the job counts (in all and by hour) and the reconciler's findings by cause,
with the deltas Postgres folds into them."""

from __future__ import annotations

from typing import Any

from sqlalchemy import (
    BigInteger,
    Boolean,
    Column,
    Integer,
    String,
    Table,
    Text,
)

from ledger.persistence.schema_metadata import StatusText, Time, metadata

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
# Insert-only (Postgres): each change of a jobs row, +jobs to its group; a change of status
# alone is one row that also says the group it left (`from_status`, `from_code`: -jobs there,
# migration 0028), any other change two rows. The compactor deletes what it folds. No key, no
# index: writers only append.
job_count_deltas = Table(
    "job_count_deltas",
    metadata,
    Column("hour", BigInteger, nullable=False),
    *_key_columns(keyed=False),
    Column("jobs", Integer, nullable=False),
    Column("from_status", StatusText, nullable=True),
    Column("from_code", String(64), nullable=True),
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

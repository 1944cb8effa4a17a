"""The ledger's tables, declared once; Alembic's migrations must produce exactly this.

Each group is declared in a module of its own, on the one `metadata` (`schema_metadata`): the
ledger (`schema_log`), the read models (`schema_read_models`), operational state
(`schema_operations`), ledger order and the Merkle tree (`schema_order`), kept counts
(`schema_counts`), partitions and archives (`schema_archives`). This module gathers them, so
`from ledger.persistence.schema import jobs` reads every table, and holds the revision."""

from __future__ import annotations

from ledger.persistence.schema_archives import (
    PARTITION_GUARDS,
    PARTITIONED_WITHOUT_PK,
    archived_jobs,
    archives,
    jobs_partitions,
    ledger_partitions,
)
from ledger.persistence.schema_counts import (
    finding_count_deltas,
    finding_counts,
    job_count_deltas,
    job_counts,
    job_counts_hourly,
)
from ledger.persistence.schema_log import events
from ledger.persistence.schema_metadata import JobId, Json, Position, StatusText, Time, metadata
from ledger.persistence.schema_operations import (
    JOBS_PARTITION_KEY,
    PARTITION_SIZE_KEY,
    REQUEST_KEY,
    dispatches,
    leases,
    ledger_meta,
    queue_epochs,
    rate_buckets,
    read_model_rebuild,
    verifications,
    webhook_attempts,
    webhook_cursor,
    webhook_deliveries,
)
from ledger.persistence.schema_order import (
    ledger_events,
    ledger_order,
    ledger_sequencer,
    ledger_ticks,
    ledger_tree,
    merkle_gaps,
    merkle_nodes,
    views,
)
from ledger.persistence.schema_read_models import (
    NOT_FOLDED,
    READ_MODEL_TABLES,
    brakes,
    jobs,
    tokens,
    webhooks,
)

__all__ = [
    "APPEND_ONLY_CONSTRAINT",
    "APP_ROLE_CONSTRAINT",
    "JOBS_PARTITION_KEY",
    "NOT_FOLDED",
    "PARTITIONED_WITHOUT_PK",
    "PARTITION_GUARDS",
    "PARTITION_SIZE_KEY",
    "READ_MODEL_TABLES",
    "REQUEST_KEY",
    "SCHEMA_REVISION",
    "JobId",
    "Json",
    "Position",
    "StatusText",
    "Time",
    "archived_jobs",
    "archives",
    "brakes",
    "dispatches",
    "events",
    "finding_count_deltas",
    "finding_counts",
    "job_count_deltas",
    "job_counts",
    "job_counts_hourly",
    "jobs",
    "jobs_partitions",
    "leases",
    "ledger_events",
    "ledger_meta",
    "ledger_order",
    "ledger_partitions",
    "ledger_sequencer",
    "ledger_ticks",
    "ledger_tree",
    "merkle_gaps",
    "merkle_nodes",
    "metadata",
    "queue_epochs",
    "rate_buckets",
    "read_model_rebuild",
    "tokens",
    "unique_constraints",
    "verifications",
    "views",
    "webhook_attempts",
    "webhook_cursor",
    "webhook_deliveries",
    "webhooks",
]

# The revision this code reads and writes: a ledger at an older one is not ready (/readyz) until
# `outcomes migrate` runs (tests/persistence/test_migrations.py holds it to Alembic's head).
SCHEMA_REVISION = "0028"


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

"""Driver errors become ledger errors here, and nowhere else: by SQLSTATE and constraint name
on Postgres, by extended result code and constraint columns on SQLite (the codes each database
documents), never by the wording of a message."""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import psycopg
from sqlalchemy import exc as sa_exc

from ledger.errors import (
    AlreadyTerminalError,
    ConcurrencyError,
    ConfigurationError,
    DuplicateEventError,
    IdempotencyKeyTakenError,
    ImmutableLedgerError,
    InvalidEventError,
    LedgerError,
    NoPartitionError,
    SchemaMissingError,
    StorageError,
    StorageUnavailableError,
)
from ledger.persistence.schema import (
    APP_ROLE_CONSTRAINT,
    APPEND_ONLY_CONSTRAINT,
    unique_constraints,
)

# What each unique constraint means when a write breaks it.
_CONFLICTS = {
    "uq_events_one_terminal": "terminal",
    "uq_events_stream_version": "version",
    "uq_events_event_id": "event_id",
    "uq_jobs_account_idempotency_key": "idempotency",
}
# Postgres: each partition's unique indexes (migrations 0018 and 0020) keep the rules of the
# four above within it, named `<partition>_<rule>`.
_PARTITION_GUARD = re.compile(
    r"^(?:events_(?:p\d+|kept)_(one_terminal|stream_version|event_id)"
    r"|jobs_(?:t\d+|legacy_low|legacy_high|default)_(idempotency))$"
)
_BY_GUARD = {
    "one_terminal": "terminal",
    "stream_version": "version",
    "event_id": "event_id",
    "idempotency": "idempotency",
}
_PG_CHECK_VIOLATION = "23514"  # also: a row no partition takes
_PARTITIONED = ("events", "ledger_order")
# SQLite names the columns of a broken unique constraint, not the constraint: map them back.
_BY_COLUMNS = {columns: name for name, columns in unique_constraints().items()}

# SQLSTATE classes that mean "the server or the connection is gone", not "your SQL is wrong":
# connection exceptions, insufficient resources, operator intervention (shutdown, restart).
_PG_UNAVAILABLE = ("08", "53", "57P")
_PG_UNIQUE_VIOLATION = "23505"
_PG_UNDEFINED_TABLE = "42P01"
_PG_DATA_EXCEPTION = "22"
# SQLite extended result codes (by name) that mean the file cannot be used right now.
_SQLITE_UNAVAILABLE = (
    "SQLITE_BUSY",
    "SQLITE_LOCKED",
    "SQLITE_IOERR",
    "SQLITE_CANTOPEN",
    "SQLITE_READONLY",
    "SQLITE_FULL",
    "SQLITE_PROTOCOL",
)


def translate(
    error: sa_exc.SQLAlchemyError | psycopg.Error, *, stream_id: str = "", event_id: str = ""
) -> LedgerError:
    """A driver error (raw, or wrapped by SQLAlchemy) as the ledger's own."""
    orig = error if isinstance(error, psycopg.Error) else getattr(error, "orig", None)
    text = _first_line(orig if orig is not None else error)
    if isinstance(error, sa_exc.DBAPIError) and error.connection_invalidated:
        return StorageUnavailableError(text)
    sqlstate = getattr(orig, "sqlstate", None)
    if sqlstate is not None or _is_psycopg(orig):
        return _postgres(orig, sqlstate, text, stream_id, event_id)
    if hasattr(orig, "sqlite_errorname"):
        return _sqlite(orig, text, stream_id, event_id)
    return StorageError(text)


def _postgres(
    orig: Any, sqlstate: str | None, text: str, stream_id: str, event_id: str
) -> LedgerError:
    if sqlstate is None:  # psycopg without a SQLSTATE: the connection itself failed
        return StorageUnavailableError(text)
    constraint = getattr(getattr(orig, "diag", None), "constraint_name", None)
    if constraint == APPEND_ONLY_CONSTRAINT:  # raised by the events table's triggers
        return ImmutableLedgerError(text)
    if constraint == APP_ROLE_CONSTRAINT:  # raised by the grants script (persistence.privileges)
        return ConfigurationError(text)
    if sqlstate == _PG_UNIQUE_VIOLATION:
        return _conflict(constraint, text, stream_id, event_id)
    table = getattr(getattr(orig, "diag", None), "table_name", None)
    if sqlstate == _PG_CHECK_VIOLATION and constraint is None and table in _PARTITIONED:
        return NoPartitionError(
            f"{text}: the partitions ahead of the writers ran out; `outcomes migrate` (or a "
            "running reconciler) makes more"
        )
    if sqlstate == _PG_UNDEFINED_TABLE:
        return _schema_missing()
    if sqlstate.startswith(_PG_DATA_EXCEPTION):
        return InvalidEventError(text)
    if sqlstate.startswith(_PG_UNAVAILABLE):
        return StorageUnavailableError(text)
    return StorageError(text)


def _sqlite(orig: Any, text: str, stream_id: str, event_id: str) -> LedgerError:
    name: str = orig.sqlite_errorname or ""
    if name == "SQLITE_CONSTRAINT_TRIGGER":  # the only triggers are the append-only ones
        return ImmutableLedgerError(text)
    if name in ("SQLITE_CONSTRAINT_UNIQUE", "SQLITE_CONSTRAINT_PRIMARYKEY"):
        # SQLite's documented report: "UNIQUE constraint failed: table.col, table.col"
        columns = tuple(c.strip() for c in text.partition(":")[2].split(","))
        return _conflict(_BY_COLUMNS.get(columns), text, stream_id, event_id)
    if name.startswith(_SQLITE_UNAVAILABLE):
        if name.startswith("SQLITE_BUSY"):
            return StorageUnavailableError("the SQLite ledger stayed locked past the busy timeout")
        return StorageUnavailableError(text)
    if name == "SQLITE_ERROR" and text.startswith("no such table"):
        # SQLite gives a missing table no code of its own: SQLITE_ERROR and this report.
        return _schema_missing()
    return StorageError(text)


def _conflict(constraint: str | None, text: str, stream_id: str, event_id: str) -> LedgerError:
    guard = _PARTITION_GUARD.match(constraint or "")
    rule = (guard.group(1) or guard.group(2)) if guard else None
    kind = _BY_GUARD[rule] if rule else _CONFLICTS.get(constraint or "")
    if kind == "terminal":
        return AlreadyTerminalError(stream_id)
    if kind == "version":
        return ConcurrencyError(stream_id, None, None)
    if kind == "event_id":
        return DuplicateEventError(event_id)
    if kind == "idempotency":
        return IdempotencyKeyTakenError(text)
    return StorageError(text)


def _schema_missing() -> SchemaMissingError:
    return SchemaMissingError("the ledger's tables are missing: run `outcomes migrate`")


def _is_psycopg(orig: object) -> bool:
    return type(orig).__module__.startswith("psycopg")


def _first_line(error: object) -> str:
    text = str(error)
    return text.splitlines()[0] if text else type(error).__name__


@contextmanager
def translated(*, stream_id: str = "", event_id: str = "") -> Iterator[None]:
    try:
        yield
    except (sa_exc.SQLAlchemyError, psycopg.Error) as error:
        raise translate(error, stream_id=stream_id, event_id=event_id) from error

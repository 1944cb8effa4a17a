"""Driver errors become ledger errors here, and nowhere else."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from sqlalchemy import exc as sa_exc

from ledger.errors import (
    AlreadyTerminalError,
    ConcurrencyError,
    DuplicateEventError,
    IdempotencyKeyTakenError,
    ImmutableLedgerError,
    InvalidEventError,
    LedgerError,
    SchemaMissingError,
    StorageError,
    StorageUnavailableError,
)


def _constraint(error: sa_exc.DBAPIError) -> str:
    diag = getattr(error.orig, "diag", None)  # psycopg names the constraint
    name = getattr(diag, "constraint_name", None) if diag else None
    return name or str(error.orig)


def translate(
    error: sa_exc.SQLAlchemyError, *, stream_id: str = "", event_id: str = ""
) -> LedgerError:
    text = str(getattr(error, "orig", error))
    if "append-only" in text:  # our triggers (SQLite reports them as integrity errors)
        return ImmutableLedgerError(text.splitlines()[0])
    if isinstance(error, sa_exc.IntegrityError):
        where = _constraint(error)
        if "one_terminal" in where or where.endswith("events.stream_id"):
            return AlreadyTerminalError(stream_id)
        if "stream_version" in where:
            return ConcurrencyError(stream_id, None, None)
        if "event_id" in where:
            return DuplicateEventError(event_id)
        if "idempotency" in where:
            return IdempotencyKeyTakenError(text)
        return StorageError(text)
    if "no such table" in text or "UndefinedTable" in type(getattr(error, "orig", None)).__name__:
        return SchemaMissingError("the ledger's tables are missing: run `outcomes migrate`")
    if isinstance(error, sa_exc.DataError):
        return InvalidEventError(text.splitlines()[0])
    first_line = text.splitlines()[0] if text else type(error).__name__
    if _unavailable(error, text):
        if "database is locked" in text:
            return StorageUnavailableError("the SQLite ledger stayed locked past the busy timeout")
        return StorageUnavailableError(first_line)
    return StorageError(first_line)


# SQLSTATE classes that mean "the server or the connection is gone", not "your SQL is wrong":
# connection exceptions, insufficient resources, operator intervention (shutdown, restart).
_UNAVAILABLE_SQLSTATE = ("08", "53", "57P")
_UNAVAILABLE_SQLITE = ("database is locked", "disk i/o error", "unable to open", "readonly")


def _unavailable(error: sa_exc.SQLAlchemyError, text: str) -> bool:
    """Only failures worth retrying as they are: a retried write reuses its event ids."""
    if isinstance(error, sa_exc.DBAPIError) and error.connection_invalidated:
        return True
    if not isinstance(error, sa_exc.OperationalError | sa_exc.InterfaceError):
        return False
    sqlstate = getattr(error.orig, "sqlstate", None)
    if sqlstate:
        return bool(sqlstate.startswith(_UNAVAILABLE_SQLSTATE))
    if type(error.orig).__module__.startswith("sqlite3"):
        return any(marker in text.lower() for marker in _UNAVAILABLE_SQLITE)
    return True  # psycopg without a SQLSTATE: the connection itself failed


@contextmanager
def translated(*, stream_id: str = "", event_id: str = "") -> Iterator[None]:
    try:
        yield
    except sa_exc.SQLAlchemyError as error:
        raise translate(error, stream_id=stream_id, event_id=event_id) from error

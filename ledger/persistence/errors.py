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
    if isinstance(error, sa_exc.OperationalError | sa_exc.InterfaceError) or (
        isinstance(error, sa_exc.DBAPIError) and error.connection_invalidated
    ):
        if "database is locked" in text:
            return StorageUnavailableError("the SQLite ledger stayed locked past the busy timeout")
        return StorageUnavailableError(text.splitlines()[0] if text else "database unavailable")
    return StorageError(text.splitlines()[0] if text else type(error).__name__)


@contextmanager
def translated(*, stream_id: str = "", event_id: str = "") -> Iterator[None]:
    try:
        yield
    except sa_exc.SQLAlchemyError as error:
        raise translate(error, stream_id=stream_id, event_id=event_id) from error

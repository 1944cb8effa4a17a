"""The ledger's one exception tree.

Driver errors (psycopg, sqlite3, SQLAlchemy) are translated into these once, in
`ledger.persistence.errors`; nothing above the persistence layer sees a driver type.
"""

from __future__ import annotations


class LedgerError(Exception):
    """Base of every error the ledger raises on purpose."""


class ConfigurationError(LedgerError):
    """A setting is missing or malformed (bad URL, unknown scheme, bad value)."""


class InvalidEventError(LedgerError):
    """An event's data cannot be recorded as given (bad shape, NUL bytes, not JSON)."""


class ConcurrencyError(LedgerError):
    """Another writer appended to the stream first: the expected version is stale."""

    def __init__(self, stream_id: str, expected: int | None, actual: int | None) -> None:
        super().__init__(f"stream {stream_id!r}: expected version {expected}, found {actual}")
        self.stream_id = stream_id
        self.expected = expected
        self.actual = actual


class AlreadyTerminalError(LedgerError):
    """The job already has its one terminal outcome; a second one is refused."""

    def __init__(self, stream_id: str) -> None:
        super().__init__(f"stream {stream_id!r} already has a terminal event")
        self.stream_id = stream_id


class DuplicateEventError(LedgerError):
    """An event with this event id was already recorded (a retried write that had landed)."""

    def __init__(self, event_id: str) -> None:
        super().__init__(f"event {event_id} is already recorded")
        self.event_id = event_id


class StreamNotFoundError(LedgerError):
    """No event has been recorded on this stream."""

    def __init__(self, stream_id: str) -> None:
        super().__init__(f"stream {stream_id!r} does not exist")
        self.stream_id = stream_id


class StorageUnavailableError(LedgerError):
    """The database could not be reached or dropped the connection; the write did not commit
    or its fate is unknown. Safe to retry with the same event ids."""


class ImmutableLedgerError(LedgerError):
    """Something tried to update, delete or truncate recorded events."""


class StorageError(LedgerError):
    """Any other database failure, translated (the driver's text is kept as the message)."""


class SchemaMissingError(LedgerError):
    """The ledger's tables do not exist: run `outcomes migrate`."""


class DigestError(LedgerError):
    """A digest file is unreadable or not a ledger digest."""


class IdempotencyKeyTakenError(LedgerError):
    """Another job of this account already holds the idempotency key."""


class ContentionError(LedgerError):
    """Concurrent writers kept colliding on the same key; nothing was recorded. Retry."""

"""The event store: append with an expected version, read a stream, tail the log.

Positions become visible in commit order, not insert order. A reader tailing "after position
N" would skip a lower position that commits after a higher one, so every appending
transaction on Postgres takes one transaction-level advisory lock just before it inserts and
holds it to commit: positions are handed out in commit order. SQLite writers are serialized by
BEGIN IMMEDIATE to the same effect. Read models are updated inside the same transaction.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from sqlalchemy import Connection, Engine, Row, bindparam, func, insert, select, text

from ledger.chain import ChainLink, event_hash, normalize_data, utc
from ledger.errors import ConcurrencyError
from ledger.events import NewEvent, RecordedEvent
from ledger.persistence.engine import READ_ONLY
from ledger.persistence.errors import translated
from ledger.persistence.schema import events

# pg_advisory_xact_lock key for appends ("outc" "appd").
APPEND_LOCK_KEY = 0x6F757463_61707064 & 0x7FFFFFFFFFFFFFFF
NO_STREAM = 0  # expected_version for a stream that must not exist yet

_COLUMNS = (
    events.c.position,
    events.c.stream_id,
    events.c.stream_version,
    events.c.event_id,
    events.c.type,
    events.c.data,
    events.c.code,
    events.c.actor,
    events.c.recorded_at,
    events.c.prev_hash,
    events.c.hash,
)

# Built once: constructing SQLAlchemy statements is a real cost on the hot path.
_HEAD = (
    select(events.c.stream_version, events.c.hash)
    .where(events.c.stream_id == bindparam("stream_id"))
    .order_by(events.c.stream_version.desc())
    .limit(1)
)
_INSERT = insert(events).returning(events.c.position, sort_by_parameter_order=True)
_PAGE = (
    select(*_COLUMNS)
    .where(events.c.position > bindparam("after"))
    .order_by(events.c.position)
    .limit(bindparam("limit"))
)
_LOCK = text("SELECT pg_advisory_xact_lock(:k)")
if TYPE_CHECKING:  # Row's type parameters differ across SQLAlchemy 2.x releases
    RowT = Row[*tuple[Any, ...]]


def _pages(read: Callable[[int, int], Sequence[RowT]], batch: int) -> Iterator[RowT]:
    """Every event row in position order, one keyset page at a time (constant memory)."""
    after = 0
    while rows := read(after, batch):
        yield from rows
        after = rows[-1].position


def row_to_event(row: RowT) -> RecordedEvent:
    return RecordedEvent(
        position=row.position,
        stream_id=row.stream_id,
        stream_version=row.stream_version,
        event_id=row.event_id,
        type=row.type,
        data=row.data,
        code=row.code,
        actor=row.actor,
        recorded_at=utc(row.recorded_at),
        prev_hash=row.prev_hash,
        hash=row.hash,
    )


def row_to_link(row: RowT) -> ChainLink:
    return ChainLink(
        position=row.position,
        stream_id=row.stream_id,
        stream_version=row.stream_version,
        event_id=str(row.event_id),
        type=row.type,
        data=row.data,
        code=row.code,
        actor=row.actor,
        recorded_at=row.recorded_at,
        prev_hash=row.prev_hash,
        hash=row.hash,
    )


class Projection:
    """A read model kept in step with the events, inside the appending transaction."""

    def handles(self, event_type: str) -> bool:
        raise NotImplementedError

    def apply(self, conn: Connection, recorded: Sequence[RecordedEvent]) -> None:
        raise NotImplementedError

    def clear(self, conn: Connection) -> None:
        raise NotImplementedError

    def fold_into(self, views: dict[str, Any], event: RecordedEvent) -> None:
        """Rebuild, step 1: fold one event into in-memory views."""
        raise NotImplementedError

    def write_all(self, conn: Connection, views: dict[str, Any]) -> None:
        """Rebuild, step 2: write the folded views into the emptied table."""
        raise NotImplementedError


class Transaction:
    """One database transaction in which several streams may be read and appended to."""

    def __init__(self, conn: Connection, projections: Sequence[Projection]) -> None:
        self.conn = conn
        self._projections = projections
        self._locked = False
        self._postgres = conn.dialect.name == "postgresql"

    def head(self, stream_id: str) -> tuple[int, str | None]:
        """(version, hash) of the stream's last event; (0, None) for a new stream."""
        with translated(stream_id=stream_id):
            row = self.conn.execute(_HEAD, {"stream_id": stream_id}).first()
        return (row.stream_version, row.hash) if row else (0, None)

    def read_stream(self, stream_id: str) -> list[RecordedEvent]:
        query = (
            select(*_COLUMNS)
            .where(events.c.stream_id == stream_id)
            .order_by(events.c.stream_version)
        )
        with translated(stream_id=stream_id):
            return [row_to_event(r) for r in self.conn.execute(query)]

    def append(
        self,
        stream_id: str,
        new_events: Sequence[NewEvent],
        expected_version: int | None = None,
    ) -> list[RecordedEvent]:
        """Append after `expected_version` (None: after whatever the head is).

        Raises ConcurrencyError when the stream moved, AlreadyTerminalError on a second
        terminal job event, DuplicateEventError when an event id is already recorded.
        """
        if not new_events:
            return []
        # Lock first: then the head read sees every append committed before ours.
        self.lock_positions()
        version, prev_hash = self.head(stream_id)
        if expected_version is not None and expected_version != version:
            raise ConcurrencyError(stream_id, expected_version, version)
        rows = self._rows(stream_id, new_events, version, prev_hash)
        with translated(stream_id=stream_id, event_id=str(new_events[0].event_id)):
            # One row: a plain execute (an executemany costs more for a single row).
            result = self.conn.execute(_INSERT, rows[0] if len(rows) == 1 else rows)
            positions = [r.position for r in result]
            recorded = [
                RecordedEvent(position=p, **row) for p, row in zip(positions, rows, strict=True)
            ]
            for projection in self._projections:
                mine = [e for e in recorded if projection.handles(e.type)]
                if mine:
                    projection.apply(self.conn, mine)
        return recorded

    def _rows(
        self, stream_id: str, new_events: Sequence[NewEvent], version: int, prev_hash: str | None
    ) -> list[dict[str, Any]]:
        recorded_at = datetime.now(UTC)
        rows = []
        for offset, new in enumerate(new_events, start=1):
            data = normalize_data(new.payload.model_dump(mode="json"))
            code = new.payload.code.value if new.payload.code else None
            fields: dict[str, Any] = {
                "stream_id": stream_id,
                "stream_version": version + offset,
                "event_id": new.event_id,
                "type": new.payload.type,
                "data": data,
                "code": code,
                "actor": new.actor,
                "recorded_at": recorded_at,
                "prev_hash": prev_hash,
            }
            fields["hash"] = event_hash(**(fields | {"event_id": str(new.event_id)}))
            prev_hash = fields["hash"]
            rows.append(fields)
        return rows

    def iter_events(self, batch: int = 5000) -> Iterator[RecordedEvent]:
        """Every event in position order, keyset-paged, inside this transaction."""

        def read(after: int, limit: int) -> Sequence[RowT]:
            with translated():
                return self.conn.execute(_PAGE, {"after": after, "limit": limit}).all()

        return (row_to_event(row) for row in _pages(read, batch))

    def lock_positions(self) -> None:
        """Hold the append lock to commit: no other append gets a position meanwhile."""
        if self._postgres and not self._locked:
            self.conn.execute(_LOCK, {"k": APPEND_LOCK_KEY})
            self._locked = True


class EventStore:
    def __init__(self, engine: Engine, projections: Sequence[Projection] = ()) -> None:
        self.engine = engine
        self.projections = list(projections)

    @property
    def dialect(self) -> str:
        return self.engine.dialect.name

    @contextmanager
    def transaction(self) -> Iterator[Transaction]:
        with translated(), self.engine.begin() as conn:
            yield Transaction(conn, self.projections)

    @contextmanager
    def reading(self) -> Iterator[Connection]:
        """A read-only connection (on SQLite it does not queue behind writers)."""
        with translated(), self.engine.connect() as conn:
            conn = conn.execution_options(**{READ_ONLY: True})
            with conn.begin():
                yield conn

    def append(
        self,
        stream_id: str,
        new_events: Sequence[NewEvent],
        expected_version: int | None = None,
    ) -> list[RecordedEvent]:
        with self.transaction() as tx:
            return tx.append(stream_id, new_events, expected_version)

    def read_stream(self, stream_id: str) -> list[RecordedEvent]:
        with self.reading() as conn:
            return Transaction(conn, ()).read_stream(stream_id)

    def read_after(self, position: int, limit: int = 1000) -> list[RecordedEvent]:
        """Events after `position`, in position order; never skips one that commits later."""
        return [row_to_event(row) for row in self._read_page(position, limit)]

    def _read_page(self, after: int, limit: int) -> Sequence[RowT]:
        with self.reading() as conn:
            return conn.execute(_PAGE, {"after": after, "limit": limit}).all()

    def last_position(self) -> int:
        with self.reading() as conn:
            return int(
                conn.execute(select(func.coalesce(func.max(events.c.position), 0))).scalar_one()
            )

    def iter_links(self, batch: int = 5000) -> Iterator[ChainLink]:
        """Every event as a chain link, in position order, page by page."""
        return (row_to_link(row) for row in _pages(self._read_page, batch))

    def iter_events(self, batch: int = 5000) -> Iterator[RecordedEvent]:
        return (row_to_event(row) for row in _pages(self._read_page, batch))

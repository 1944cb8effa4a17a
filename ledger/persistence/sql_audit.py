"""The audit's part of the contract in SQL (Postgres and SQLite; `audit_contract.py`): pages
in ledger order and in stream order, read-model rows by key and the rows no event makes, every
stream's head as a stream, and the recorded verifications. Mixed into `SqlReads` and
`SqlWrites` over the same connection.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from datetime import datetime
from typing import Any

import orjson
from sqlalchemy import (
    Column,
    ColumnElement,
    Connection,
    Select,
    Table,
    Text,
    any_,
    bindparam,
    cast,
    exists,
    func,
    insert,
    literal,
    select,
    tuple_,
)
from sqlalchemy.dialects.postgresql import ARRAY

from ledger.clock import utc
from ledger.events import RecordedEvent
from ledger.persistence.schema import (
    NOT_FOLDED,
    READ_MODEL_TABLES,
    events,
    ledger_events,
    ledger_order,
    verifications,
)
from ledger.persistence.sql_rows import EVENT_COLUMNS, IN_CHUNK
from ledger.queries import LedgerLink, StreamEvent, StreamKey
from ledger.read_models import READ_MODELS, ReadModel
from ledger.verification_record import SAMPLE, VerificationRecord

TABLES: dict[str, Table] = {table.name: table for table in READ_MODEL_TABLES}
MODELS: dict[str, ReadModel[Any]] = {model.table: model for model in READ_MODELS}
ANY_CHUNK = 2000  # stream ids a Postgres read of whole streams asks for at once (one array)
DIGEST_ROWS = 200  # rows a streamed digest fetches at a time (a round trip each)

_LINKS = (
    select(
        ledger_events.c.position,
        ledger_events.c.stream_id,
        ledger_events.c.stream_version,
        ledger_events.c.hash,
        ledger_events.c.ledger_hash,
    )
    .where(ledger_events.c.position > bindparam("after"))
    .order_by(ledger_events.c.position)
    .limit(bindparam("limit"))
)
# An event's ledger position on Postgres: its order row's (the lowest, should a forger have
# given it two; `order_check` names that). None: not sequenced yet.
_PLACE = (
    select(ledger_order.c.position)
    .where(ledger_order.c.event_position == events.c.position)
    .order_by(ledger_order.c.position)
    .limit(1)
    .scalar_subquery()
)
_BY_STREAM = (events.c.stream_id, events.c.stream_version)
_AFTER_KEY = tuple_(*_BY_STREAM) > tuple_(bindparam("stream_id"), bindparam("version"))


def table_of(name: str) -> tuple[Table, Column[Any], ReadModel[Any]]:
    found = TABLES.get(name)
    if found is None:
        raise ValueError(f"{name!r} is not a read model")
    return found, next(iter(found.primary_key.columns)), MODELS[name]


def stored_columns(table: Table) -> list[ColumnElement[Any]]:
    """Every folded column (not `NOT_FOLDED`'s); the view as text, decoded by `as_stored`: a
    view damaged into something that is not JSON must reach the comparison as it is, not fail
    the whole page."""
    return [
        cast(c, Text).label(c.name) if c.name == "view" else c
        for c in table.c
        if c.name not in NOT_FOLDED
    ]


def as_stored(name: str, value: Any) -> Any:
    if isinstance(value, datetime):
        return utc(value)
    if name == "view" and isinstance(value, str):
        try:
            return orjson.loads(value)
        except orjson.JSONDecodeError:
            return value
    return value


def no_event_makes(table: Table, key: Column[Any], model: ReadModel[Any]) -> ColumnElement[bool]:
    """The row's stream holds no event of the model's types (every committed event counts,
    sequenced or not: the append that wrote the row wrote its events in the same commit)."""
    home = literal(model.stream_prefix).concat(key)
    return ~exists().where(events.c.stream_id == home, events.c.type.in_(sorted(model.types)))


def _chunks(items: Sequence[str]) -> Iterator[list[str]]:
    for start in range(0, len(items), IN_CHUNK):
        yield list(items[start : start + IN_CHUNK])


def _after(query: Select[Any], after: StreamKey | None) -> Select[Any]:
    if after is None:
        return query
    return query.where(_AFTER_KEY).params(stream_id=after[0], version=after[1])


class SqlAuditReads:
    conn: Connection

    @property
    def _on_postgres(self) -> bool:
        return self.conn.dialect.name == "postgresql"

    def ledger_links(self, after: int, limit: int) -> list[LedgerLink]:
        rows = self.conn.execute(_LINKS, {"after": after, "limit": limit})
        return [LedgerLink(*row) for row in rows]

    def events_by_stream(self, after: StreamKey | None, limit: int) -> list[StreamEvent]:
        query = self._placed().order_by(*_BY_STREAM).limit(limit)
        return self._stream_events(_after(query, after))

    def events_in_streams(self, stream_ids: Sequence[str]) -> list[StreamEvent]:
        names = sorted(set(stream_ids))
        found: list[StreamEvent] = []
        if self._on_postgres:  # one array parameter: planned once, not once a name
            for start in range(0, len(names), ANY_CHUNK):
                wanted = bindparam("names", names[start : start + ANY_CHUNK], ARRAY(Text))
                query = self._placed().where(events.c.stream_id == any_(wanted))
                found.extend(self._stream_events(query.order_by(*_BY_STREAM)))
            return found
        for chunk in _chunks(names):  # each stream's events together
            query = self._placed().where(events.c.stream_id.in_(chunk)).order_by(*_BY_STREAM)
            found.extend(self._stream_events(query))
        return found

    def _placed(self) -> Select[Any]:
        place = _PLACE if self._on_postgres else events.c.position  # SQLite: sequenced at write
        return select(*EVENT_COLUMNS, place.label("place"))

    def _stream_events(self, query: Select[Any]) -> list[StreamEvent]:
        found = []
        for row in self.conn.execute(query):
            sequenced = row.place is not None
            written = row.position
            event = RecordedEvent(
                position=row.place if sequenced else written,
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
                write_position=written if sequenced and written != row.place else None,
            )
            found.append(StreamEvent(event, sequenced))
        return found

    def links_by_stream(self, after: StreamKey | None, limit: int) -> list[LedgerLink]:
        columns = (events.c.stream_id, events.c.stream_version, events.c.hash)
        if self._on_postgres:
            placed = events.join(ledger_order, ledger_order.c.event_position == events.c.position)
            query = select(ledger_order.c.position, *columns).select_from(placed)
        else:
            query = select(events.c.position, *columns)
        query = _after(query.order_by(*_BY_STREAM).limit(limit), after)
        rows = self.conn.execute(query).all()
        return [LedgerLink(int(r[0]), str(r[1]), int(r[2]), str(r[3]), None) for r in rows]

    def streams_present(self, stream_ids: Sequence[str], upto: int | None) -> set[str]:
        ev = ledger_events
        found: set[str] = set()
        for chunk in _chunks(stream_ids):
            query = select(ev.c.stream_id).where(ev.c.stream_id.in_(chunk)).distinct()
            if upto is not None:
                query = query.where(ev.c.position <= upto)
            found.update(self.conn.execute(query).scalars())
        return found

    def read_model_rows_by_key(self, table: str, keys: Sequence[str]) -> list[dict[str, Any]]:
        found, key, _ = table_of(table)
        rows: list[dict[str, Any]] = []
        for chunk in _chunks(keys):
            query = select(*stored_columns(found)).where(key.in_(chunk))
            rows.extend(
                {name: as_stored(name, value) for name, value in row.items()}
                for row in self.conn.execute(query).mappings()
            )
        return rows

    def rows_without_events(self, table: str, after: str | None, limit: int) -> list[str]:
        """A page of keys at a time, then their streams' events by the stream index. Not one
        anti-join: at 1M jobs Postgres planned `NOT EXISTS` as a join filter against every
        event of the model's types (its estimate of them far too low), which ran for hours;
        keys then lookups stay O(rows) whatever the statistics say. Returns the first page
        holding such rows (fewer than `limit` is not the end; empty is)."""
        _, key, model = table_of(table)
        types = sorted(model.types)
        while True:
            page = select(key).order_by(key).limit(limit)
            if after is not None:
                page = page.where(key > after)
            keys = [str(k) for k in self.conn.execute(page).scalars()]
            if not keys:
                return []
            made: set[str] = set()
            for chunk in _chunks([model.home_stream(k) for k in keys]):
                query = select(events.c.stream_id).where(
                    events.c.stream_id.in_(chunk), events.c.type.in_(types)
                )
                made.update(self.conn.execute(query.distinct()).scalars())
            missing = [k for k in keys if model.home_stream(k) not in made]
            if missing:
                return missing
            after = keys[-1]

    def count_rows(self, table: str) -> int:
        found, _, _ = table_of(table)
        return int(self.conn.execute(select(func.count()).select_from(found)).scalar_one())

    def ledger_span(self, upto: int) -> tuple[int, str | None]:
        ev = ledger_events
        count = select(func.count()).select_from(ev).where(ev.c.position <= upto)
        last = select(ev.c.ledger_hash).where(ev.c.position <= upto)
        link = self.conn.execute(last.order_by(ev.c.position.desc()).limit(1)).scalar()
        return int(self.conn.execute(count).scalar_one()), link

    def digest_heads(self, upto: int) -> Iterator[tuple[str, int, str]]:
        ev = ledger_events
        if self._on_postgres:
            # Code-point order whatever the database's collation ("C"); the database sorts,
            # spilling to disk past work_mem, and the rows come through a server-side cursor.
            by_name = ev.c.stream_id.collate("C")
            query = (
                select(ev.c.stream_id, ev.c.stream_version, ev.c.hash)
                .where(ev.c.position <= upto)
                .distinct(by_name)
                .order_by(by_name, ev.c.stream_version.desc())
            )
        else:
            # SQLite: a bare column beside max() comes from the row holding the max; its
            # default collation (BINARY) is code-point order for UTF-8.
            query = (
                select(ev.c.stream_id, func.max(ev.c.stream_version), ev.c.hash)
                .where(ev.c.position <= upto)
                .group_by(ev.c.stream_id)
                .order_by(ev.c.stream_id)
            )
        streamed = self.conn.execution_options(yield_per=DIGEST_ROWS).execute(query)
        for stream_id, version, hash_ in streamed:
            yield str(stream_id), int(version), str(hash_)

    def last_verification(self, samples: bool = True) -> VerificationRecord | None:
        query = select(verifications).order_by(verifications.c.id.desc()).limit(1)
        if not samples:  # by the key index, newest first: samples are a few rows among them
            query = query.where(verifications.c.scope != SAMPLE)
        row = self.conn.execute(query).mappings().first()
        if row is None:
            return None
        values = {k: v for k, v in row.items() if k != "id"}
        values["started_at"] = utc(values["started_at"])
        values["finished_at"] = utc(values["finished_at"])
        return VerificationRecord(**values)


class SqlAuditWrites(SqlAuditReads):
    def record_verification(self, record: VerificationRecord) -> None:
        self.conn.execute(insert(verifications).values(**vars(record)))

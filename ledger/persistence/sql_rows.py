"""What the SQL reads share: the event columns (as written, and in ledger order) and how a
row becomes a `RecordedEvent`, the event page every reader tails by (in ledger order), a job's
error cause and account/tool scope, as SQLAlchemy Core expressions (Postgres and SQLite)."""

from __future__ import annotations

import weakref
from typing import TYPE_CHECKING, Any

from sqlalchemy import ColumnElement, Connection, Engine, and_, bindparam, select, text, true

from ledger.clock import utc
from ledger.events import RecordedEvent
from ledger.persistence.schema import events, jobs, ledger_events

if TYPE_CHECKING:  # Row's type parameters differ across SQLAlchemy 2.x releases
    from sqlalchemy import Row

    RowT = Row[*tuple[Any, ...]]

IN_CHUNK = 500  # ids per IN (...) list: SQLite caps bound parameters

EVENT_COLUMNS = (
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
    events.c.ledger_hash,
)
# The same columns in ledger order (`ledger_events`): every reader that tails the ledger or
# walks it whole reads these, so what it sees is sequenced, once, in one dense order. Stream
# reads take EVENT_COLUMNS from `events` itself (a stream's own order is its versions), where on
# Postgres `position` is the row's write position and `ledger_hash` is not yet known.
ORDERED_COLUMNS = (
    *(ledger_events.c[c.name] for c in EVENT_COLUMNS),
    ledger_events.c.write_position,
)
PAGE = (
    select(*ORDERED_COLUMNS)
    .where(ledger_events.c.position > bindparam("after"))
    .order_by(ledger_events.c.position)
    .limit(bindparam("limit"))
)
# A job's error cause, read from its view (the brake a BRAKE_ENGAGED names, the silence an
# OUTCOME_MISSING names): `->>`/`#>>` on Postgres, json_extract on SQLite.
JOB_CAUSE = jobs.c.view[("error", "cause")].as_string()


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
        ledger_hash=row.ledger_hash,
        # In ledger order only, and only where it differs (Postgres).
        write_position=_write_position(row),
    )


def _write_position(row: RowT) -> int | None:
    written = getattr(row, "write_position", None)
    return None if written is None or written == row.position else int(written)


def job_scope(account: str | None, tool: str | None) -> list[ColumnElement[bool]]:
    clauses: list[ColumnElement[bool]] = [true()]
    if account is not None:
        clauses.append(jobs.c.account == account)
    if tool is not None:
        clauses.append(jobs.c.tool == tool)
    return [and_(*clauses)]


_SQLITE_TABLES_SEEN: weakref.WeakKeyDictionary[Engine, set[str]] = weakref.WeakKeyDictionary()
_SQLITE_TABLE = text("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = :name")


def sqlite_has_table(conn: Connection, name: str) -> bool:
    """Whether this SQLite database has the table `name` (a ledger not yet migrated to it is
    written as before); once seen, not asked again for this engine: a migration only adds."""
    seen = _SQLITE_TABLES_SEEN.setdefault(conn.engine, set())
    if name in seen:
        return True
    found = conn.execute(_SQLITE_TABLE, {"name": name}).first() is not None
    if found:
        seen.add(name)
    return found

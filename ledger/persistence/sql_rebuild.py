"""The online rebuild's part of the contract in SQL (Postgres and SQLite; `rebuild_contract.py`):
streams a page at a time in key order, their events as written, their locks, the rows to write
and the progress row. Mixed into `SqlReads` and `SqlWrites` over the same connection.

The locks are the append's own: `outcomes_append_jobs` and `SqlWrites.append` take each
stream's advisory lock (`outcomes_lock_key(ARRAY['stream', id])`, `locks.key_for`), in key
order. A page takes its streams' locks in the same order, in one statement, so an append and a
page never wait on each other in a circle. SQLite serializes writers anyway (no-op there).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import (
    Connection,
    bindparam,
    delete,
    insert,
    select,
    text,
    update,
)
from sqlalchemy.dialects import postgresql, sqlite

from ledger.clock import utc
from ledger.events import RecordedEvent
from ledger.persistence.locks import key_for
from ledger.persistence.schema import events, read_model_rebuild
from ledger.persistence.sql_audit import no_event_makes, table_of
from ledger.persistence.sql_rows import EVENT_COLUMNS, IN_CHUNK, row_to_event
from ledger.rebuild_state import RebuildProgress

# Evaluated row by row in the array's order: the keys come sorted, so the locks are taken in
# key order, as the append function takes its own.
_LOCK_EACH = text(
    "SELECT count(pg_advisory_xact_lock(k)) FROM unnest(CAST(:keys AS bigint[])) AS k"
)
_PROGRESS_ID = 1
_BY_STREAM = (events.c.stream_id, events.c.stream_version)
_ROWS_A_STREAM = 4  # index rows read a stream asked for: a job holds three events or so


class SqlRebuildReads:
    conn: Connection

    def stream_ids(self, after: str | None, limit: int) -> list[str]:
        # The unique index on (stream, version) walked in its order from `after`, a few rows
        # a stream, and the distinct ids taken here: a DISTINCT or GROUP BY may be planned as
        # a scan of every stream above `after`, which each page would repeat.
        query = select(events.c.stream_id).order_by(*_BY_STREAM).limit(limit * _ROWS_A_STREAM)
        if after is not None:
            query = query.where(events.c.stream_id > after)
        found = list(dict.fromkeys(str(s) for s in self.conn.execute(query).scalars()))
        return found[:limit]

    def events_of_streams(self, stream_ids: Sequence[str]) -> list[RecordedEvent]:
        if not stream_ids:
            return []
        # One range of the unique index, in its order (the ids come in key order, from
        # `stream_ids`): an IN list of them may be planned as a scan and a sort of the table
        # when its statistics are stale. A stream begun in the range meanwhile is left out.
        wanted = set(stream_ids)
        query = (
            select(*EVENT_COLUMNS)
            .where(events.c.stream_id.between(stream_ids[0], stream_ids[-1]))
            .order_by(*_BY_STREAM)
        )
        rows = self.conn.execute(query)
        return [row_to_event(row) for row in rows if row.stream_id in wanted]

    def rebuild_progress(self) -> RebuildProgress | None:
        query = select(read_model_rebuild).where(read_model_rebuild.c.id == _PROGRESS_ID)
        row = self.conn.execute(query).mappings().first()
        if row is None:
            return None
        values = {k: v for k, v in row.items() if k != "id"}
        for name in ("started_at", "updated_at", "finished_at"):
            values[name] = utc(values[name]) if values[name] is not None else None
        return RebuildProgress(**values)


class SqlRebuildWrites(SqlRebuildReads):
    def lock_streams(self, stream_ids: Sequence[str]) -> None:
        if self.conn.dialect.name != "postgresql" or not stream_ids:
            return  # SQLite: BEGIN IMMEDIATE already serializes every writer
        keys = sorted({key_for("stream", s) for s in stream_ids})
        self.conn.execute(_LOCK_EACH, {"keys": keys})

    def write_read_model_rows(
        self,
        table: str,
        inserts: Sequence[dict[str, Any]],
        updates: Sequence[dict[str, Any]],
    ) -> None:
        found, key, _ = table_of(table)
        if self.conn.dialect.name != "postgresql" and table == "jobs":
            # SQLite's appends keep no `first_position` (one events table: nothing to prune),
            # so a rebuilt row is left as an appended one.
            inserts, updates = _unbegun(inserts), _unbegun(updates)
        if inserts:
            self.conn.execute(insert(found), list(inserts))
        if updates:
            # In place, never deleted and inserted again: a reader sees the old row or the new.
            statement = update(found).where(key == bindparam("_key"))
            self.conn.execute(statement, [row | {"_key": row[key.name]} for row in updates])

    def delete_rows_without_events(self, table: str, keys: Sequence[str]) -> int:
        found, key, model = table_of(table)
        gone = 0
        for start in range(0, len(keys), IN_CHUNK):
            chunk = list(keys[start : start + IN_CHUNK])
            statement = delete(found).where(key.in_(chunk), no_event_makes(found, key, model))
            gone += self.conn.execute(statement).rowcount
        return gone

    def save_rebuild_progress(self, progress: RebuildProgress) -> None:
        values = vars(progress) | {"id": _PROGRESS_ID}
        builder = postgresql.insert if self.conn.dialect.name == "postgresql" else sqlite.insert
        statement = builder(read_model_rebuild).values(**values)
        changed = {c: statement.excluded[c] for c in values if c != "id"}
        self.conn.execute(statement.on_conflict_do_update(index_elements=["id"], set_=changed))


def _unbegun(rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{k: v for k, v in row.items() if k != "first_position"} for row in rows]

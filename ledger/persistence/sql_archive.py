"""The SQL store's side of archives (Postgres and SQLite): the ranges that may go, what they
hold, whether they end at a clean cut, their events in ledger order, their jobs, and the
archives recorded. Recording and finishing an archive: `sql_archive_swap.py`. Mixed into
`SqlStore`.

On Postgres a range is a partition of `events` (and of `ledger_order`, with the same bounds);
on SQLite the ranges follow the same grid of `ledger_meta.partition_size` positions from the end
of the last archive, with nothing to make (its positions are its ledger order).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, Engine, Text, bindparam, cast, select, text

from ledger.archive import ArchivedJob, ArchiveRange, ArchiveRecord, CutFacts
from ledger.clock import utc
from ledger.events import RecordedEvent
from ledger.persistence.errors import translated
from ledger.persistence.schema import (
    PARTITION_SIZE_KEY,
    archived_jobs,
    archives,
    events,
    jobs,
    ledger_order,
)
from ledger.persistence.sql_archive_swap import SqlArchiveSwap
from ledger.persistence.sql_rows import EVENT_COLUMNS, row_to_event

PAGE_ROWS = 5000

_PG_RANGES = text(
    "SELECT p.lower, p.upper FROM ledger_partitions p"
    " WHERE p.upper - 1 <= outcomes_written_position() ORDER BY p.lower"
)
_SQLITE_TOP = text(
    "SELECT coalesce(max(e.position), 0) AS top,"
    " (SELECT coalesce(max(a.write_to), 1) FROM archives a) AS start,"
    f" (SELECT CAST(m.value AS INTEGER) FROM ledger_meta m WHERE m.key = '{PARTITION_SIZE_KEY}')"
    " AS size FROM events e"
)
_FACTS = text(
    "SELECT count(*) AS n, max(e.recorded_at) AS newest FROM events e"
    " WHERE e.position >= :lo AND e.position < :hi"
)
_PG_CUT = text(
    "SELECT (SELECT count(*) FROM events e WHERE e.position >= :lo AND e.position < :hi) AS n,"
    " (SELECT count(*) FROM ledger_order o"
    "   WHERE o.event_position >= :lo AND o.event_position < :hi) AS ordered,"
    " (SELECT max(o.position) FROM ledger_order o WHERE o.event_position < :hi) AS last"
)
# An event written at or after the cut, yet placed before the last one written below it.
_PG_CROSSING = text(
    "SELECT o.position, o.event_position FROM ledger_order o"
    " WHERE o.event_position >= :hi AND o.position < :last ORDER BY o.position LIMIT 1"
)
_SQLITE_LAST = text("SELECT max(e.position) FROM events e WHERE e.position < :hi")
_PG_EVENTS = (
    select(
        ledger_order.c.position,
        *(c for c in EVENT_COLUMNS if c.name not in ("position", "ledger_hash")),
        ledger_order.c.ledger_hash,
        events.c.position.label("write_position"),
    )
    .join(events, events.c.position == ledger_order.c.event_position)
    .where(
        ledger_order.c.event_position >= bindparam("lo"),
        ledger_order.c.event_position < bindparam("hi"),
        ledger_order.c.position > bindparam("after"),
    )
    .order_by(ledger_order.c.position)
    .limit(bindparam("limit"))
)
_SQLITE_EVENTS = (
    select(*EVENT_COLUMNS)
    .where(
        events.c.position >= bindparam("lo"),
        events.c.position < bindparam("hi"),
        events.c.position > bindparam("after"),
    )
    .order_by(events.c.position)
    .limit(bindparam("limit"))
)
_JOBS = (
    select(*(cast(c, Text).label(c.name) if c.name == "view" else c for c in jobs.c))
    .where(
        jobs.c.ledger_position >= bindparam("lo"),
        jobs.c.ledger_position < bindparam("hi"),
        jobs.c.terminal.is_(True),
    )
    .order_by(jobs.c.ledger_position)
    .limit(bindparam("limit"))
)
_RECORDS = select(archives).order_by(archives.c.archive_id)
_ARCHIVED_JOB = (
    select(archived_jobs.c.account, archived_jobs.c.archive_id, archives.c.created_at)
    .join(archives, archives.c.archive_id == archived_jobs.c.archive_id)
    .where(archived_jobs.c.job_id == bindparam("job_id"), archives.c.state == "done")
)


class SqlArchives(SqlArchiveSwap):
    engine: Engine
    dialect: str
    connection: Callable[[], AbstractContextManager[Connection]]

    def make_partitions(self, ahead: int) -> int:
        if self.dialect != "postgresql":
            return 0
        with translated(), self.engine.begin() as conn:
            return int(
                conn.execute(text("SELECT outcomes_make_partitions(:n)"), {"n": ahead}).scalar_one()
            )

    def partitions_ahead(self) -> int | None:
        if self.dialect != "postgresql":
            return None
        with self.connection() as conn, translated():
            return int(conn.execute(text("SELECT outcomes_partitions_ahead()")).scalar_one())

    def archive_ranges(self) -> list[tuple[int, int]]:
        with self.connection() as conn, translated():
            if self.dialect == "postgresql":
                return [(int(lo), int(hi)) for lo, hi in conn.execute(_PG_RANGES)]
            row = conn.execute(_SQLITE_TOP).one()
        top, start, size = int(row.top), int(row.start), int(row.size)
        ranges = []
        while start + size - 1 <= top:
            ranges.append((start, start + size))
            start += size
        return ranges

    def range_facts(self, lower: int, upper: int) -> ArchiveRange:
        with self.connection() as conn, translated():
            row = conn.execute(_FACTS, {"lo": lower, "hi": upper}).one()
        newest = row.newest
        if isinstance(newest, str):  # SQLite's max() of a stored time is its text
            newest = datetime.fromisoformat(newest)
        newest = utc(newest) if newest is not None else None
        return ArchiveRange(lower, upper, int(row.n), newest)

    def cut_at(self, lower: int, upper: int) -> CutFacts:
        params = {"lo": lower, "hi": upper}
        with self.connection() as conn, translated():
            if self.dialect != "postgresql":  # sequenced at write: every cut is clean
                last = conn.execute(_SQLITE_LAST, params).scalar()
                return CutFacts(upper, True, 0, int(last) if last is not None else None)
            row = conn.execute(_PG_CUT, params).one()
            last = int(row.last) if row.last is not None else None
            waiting = int(row.n) - int(row.ordered)
            if waiting or last is None:
                return CutFacts(upper, waiting == 0, waiting, last)
            crossing = conn.execute(_PG_CROSSING, params | {"last": last}).first()
        if crossing is None:
            return CutFacts(upper, True, 0, last)
        reason = (
            f"the event written at {crossing.event_position} holds ledger position "
            f"{crossing.position}, before {last}, the last of those written below {upper}"
        )
        return CutFacts(upper, False, 0, last, reason)

    def archive_events(self, lower: int, upper: int) -> Iterator[RecordedEvent]:
        query = _PG_EVENTS if self.dialect == "postgresql" else _SQLITE_EVENTS
        after = 0
        while True:
            params = {"lo": lower, "hi": upper, "after": after, "limit": PAGE_ROWS}
            with self.connection() as conn, translated():
                rows = conn.execute(query, params).all()
            if not rows:
                return
            yield from (row_to_event(row) for row in rows)
            after = int(rows[-1].position)

    def archive_jobs(self, lower: int, upper: int) -> Iterator[dict[str, Any]]:
        # Paged by the position (a job's is its own event's, so unique), which `ix_jobs_position`
        # serves in every window of `jobs`; paged by job id, each page walked every window's key
        # index to the end (1M jobs: 46 MB of the file in 17 minutes).
        start = lower
        while True:
            params = {"lo": start, "hi": upper, "limit": PAGE_ROWS}
            with self.connection() as conn, translated():
                rows = [dict(row) for row in conn.execute(_JOBS, params).mappings()]
            if not rows:
                return
            for row in rows:
                for name in ("created_at", "updated_at"):
                    row[name] = utc(row[name])
            yield from rows
            start = int(rows[-1]["ledger_position"]) + 1

    def archive_records(self) -> list[ArchiveRecord]:
        with self.connection() as conn, translated():
            rows = conn.execute(_RECORDS).mappings().all()
        return [
            ArchiveRecord(
                **{k: v for k, v in row.items() if k not in ("created_at", "manifest")},
                created_at=utc(row["created_at"]),
                manifest=str(row["manifest"]).encode(),
            )
            for row in rows
        ]

    def archived_job(self, job_id: str) -> ArchivedJob | None:
        with self.connection() as conn, translated():
            row = conn.execute(_ARCHIVED_JOB, {"job_id": job_id}).first()
        if row is None:
            return None
        return ArchivedJob(job_id, row.account, int(row.archive_id), utc(row.created_at))

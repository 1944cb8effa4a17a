"""A SQL transaction's writes (Postgres and SQLite): appends with an expected version, checked
across partitions on Postgres and linked at write on SQLite, job batches, named locks and
the leases of claimed jobs (`SqlWrites`); `ledger.persistence.sql_store` opens them."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime
from typing import TYPE_CHECKING, Any

import psycopg
from sqlalchemy import (
    Connection,
    bindparam,
    delete,
    exists,
    insert,
    select,
    text,
    tuple_,
    union_all,
    update,
)
from sqlalchemy.dialects import postgresql, sqlite

from ledger.chain import event_rows, link_rows
from ledger.clock import now
from ledger.errors import (
    AlreadyTerminalError,
    ConcurrencyError,
    DuplicateEventError,
    IdempotencyKeyTakenError,
)
from ledger.events import TERMINAL_EVENT_TYPES, JobAccepted, NewEvent, RecordedEvent
from ledger.job_view import JobView
from ledger.persistence import job_batch
from ledger.persistence.appends import Appended, JobAppend, JobAppended
from ledger.persistence.base import (
    Writes,
)
from ledger.persistence.errors import translated
from ledger.persistence.locks import lock
from ledger.persistence.projections import Projection
from ledger.persistence.schema import (
    archives,
    events,
    jobs,
    leases,
)
from ledger.persistence.sequencer_session import scalar
from ledger.persistence.sql_audit import SqlAuditWrites
from ledger.persistence.sql_outbox import SqlOutboxWrites
from ledger.persistence.sql_reads import SqlReads
from ledger.persistence.sql_rebuild import SqlRebuildWrites
from ledger.persistence.sql_rows import PAGE, row_to_event, sqlite_has_table
from ledger.persistence.sql_tree import grow_at_write
from ledger.persistence.sql_webhooks import SqlWebhookWrites

if TYPE_CHECKING:
    from ledger.persistence.sql_rows import RowT
# pg_advisory_xact_lock key for appends ("outc" "appd"): every append takes it shared. Nothing
# takes it exclusive any more (the rebuild is online: it takes the streams' own locks, a page
# at a time); it stays so that a server of an older release and this one share one number.
APPEND_LOCK_KEY = 0x6F757463_61707064 & 0x7FFFFFFFFFFFFFFF

_HEAD = (
    select(events.c.stream_version, events.c.hash)
    .where(events.c.stream_id == bindparam("stream_id"))
    .order_by(events.c.stream_version.desc())
    .limit(1)
)
_INSERT = insert(events).returning(
    events.c.position, events.c.ledger_hash, sort_by_parameter_order=True
)
# Postgres (0018): the unique indexes that kept one terminal event per job stream and one row
# per event id are each partition's, so a write checks both across partitions, under the
# stream's lock, as outcomes_append_jobs does (the indexes stay a guard within a partition).
_TERMINAL_OR_DUPLICATE = select(
    exists().where(
        events.c.stream_id == bindparam("stream_id"),
        events.c.type.in_(sorted(TERMINAL_EVENT_TYPES)),
        bindparam("closing"),
    ),
    exists().where(events.c.event_id.in_(bindparam("event_ids", expanding=True))),
)
# Postgres (0020): the idempotency key's unique index is each partition of `jobs`'s own, so a new
# job's key is looked for in every partition, under the key's lock (as outcomes_append_jobs does).
_KEY_HELD = select(jobs.c.job_id).where(
    jobs.c.account == bindparam("account"), jobs.c.idempotency_key == bindparam("key")
)
_LAST_LEDGER_HASH = select(events.c.ledger_hash).order_by(events.c.position.desc()).limit(1)
# SQLite: the link of the ledger's last event, which a new event's link follows. An archive
# removes the rows of the jobs ended below its cut and keeps the rest (tokens, brakes, jobs in
# flight), so the last row left may be far before the archive's last event, or there may be
# none: then the last link is the archive's (`archives.ledger_hash` at `ledger_last`), not
# that row's. Whichever is later in the ledger order (on a tie, the same event's link).
_LAST_ROW = (
    select(events.c.position.label("position"), events.c.ledger_hash.label("link"))
    .order_by(events.c.position.desc())
    .limit(1)
    .subquery()
)
_LAST_ARCHIVED = (
    select(archives.c.ledger_last.label("position"), archives.c.ledger_hash.label("link"))
    .where(archives.c.ledger_last.is_not(None))
    .order_by(archives.c.ledger_last.desc())
    .limit(1)
    .subquery()
)
_LAST_LINKS = union_all(select(_LAST_ROW), select(_LAST_ARCHIVED)).subquery()
_LAST_LEDGER_HASH_ARCHIVED = (
    select(_LAST_LINKS.c.link).order_by(_LAST_LINKS.c.position.desc()).limit(1)
)
_LOCK_SHARED = text("SELECT pg_advisory_xact_lock_shared(:k)")
_RENEW = (
    update(leases)
    .where(tuple_(leases.c.job_id, leases.c.attempt).in_(bindparam("held", expanding=True)))
    .values(expires_at=bindparam("expires_at"))
    .returning(leases.c.job_id, leases.c.attempt)
)
_DROP = delete(leases).where(
    leases.c.job_id == bindparam("job_id"), leases.c.attempt == bindparam("attempt")
)


def call_batch(conn: Any, body: str) -> Any:
    """One `outcomes_append_jobs` call on a psycopg connection (a prepared statement): the
    server's answer."""
    assert isinstance(conn, psycopg.Connection)
    return scalar(conn, job_batch.CALL, (body,))


def lease_upsert(dialect: str) -> Any:
    """INSERT … ON CONFLICT (job_id) DO UPDATE: a new attempt replaces a lingering lease."""
    builder = postgresql.insert if dialect == "postgresql" else sqlite.insert
    stmt = builder(leases)
    columns = {c: stmt.excluded[c] for c in ("attempt", "worker", "expires_at")}
    return stmt.on_conflict_do_update(index_elements=[leases.c.job_id], set_=columns)


_JOBS_TEXT = "SELECT view::text FROM jobs WHERE job_id = ANY(%s)"


def _last_ledger_hash(conn: Connection) -> str | None:
    """SQLite: the ledger-wide link of the ledger's last event, in the database or, when an
    archive removed it, in the newest archive (`_LAST_LEDGER_HASH_ARCHIVED`). A database not yet
    migrated to archives (0018) has only its rows; once seen to have them, not asked again."""
    if not sqlite_has_table(conn, "archives"):
        return conn.execute(_LAST_LEDGER_HASH).scalar()
    return conn.execute(_LAST_LEDGER_HASH_ARCHIVED).scalar()


def pages(read: Callable[[int, int], Sequence[RowT]], batch: int) -> Iterator[RowT]:
    """Every event row in position order, one keyset page at a time (constant memory)."""
    after = 0
    while rows := read(after, batch):
        yield from rows
        after = rows[-1].position


class SqlWrites(
    SqlReads, SqlOutboxWrites, SqlWebhookWrites, SqlAuditWrites, SqlRebuildWrites, Writes
):
    """One database transaction in which several streams may be read and appended to."""

    def __init__(self, conn: Connection, projections: Sequence[Projection], upsert: Any) -> None:
        super().__init__(conn)
        self._projections = projections
        self.lease_upsert = upsert
        self._appending = False  # the append lock is held (shared, or exclusive)
        self._postgres = conn.dialect.name == "postgresql"

    def append(
        self,
        stream_id: str,
        new_events: Sequence[NewEvent],
        expected_version: int | None = None,
    ) -> Appended:
        if not new_events:
            return Appended([], None)
        # Lock first: then the head read sees every append to the stream committed before ours.
        self._lock_stream(stream_id, new_events)
        with translated(stream_id=stream_id):
            row = self.conn.execute(_HEAD, {"stream_id": stream_id}).first()
        version, prev_hash = (row.stream_version, row.hash) if row else (0, None)
        if expected_version is not None and expected_version != version:
            raise ConcurrencyError(stream_id, expected_version, version)
        rows = event_rows(stream_id, new_events, version, prev_hash, now())
        if self._postgres:
            self._check_across_partitions(stream_id, rows)
            if version == 0:
                self._check_key_across_partitions(stream_id, new_events)
        else:  # sequenced at write; Postgres's sequencer links after commit
            with translated(stream_id=stream_id):
                link_rows(_last_ledger_hash(self.conn), rows)
        with translated(stream_id=stream_id, event_id=str(new_events[0].event_id)):
            # One row: a plain execute (an executemany costs more for a single row).
            result = self.conn.execute(_INSERT, rows[0] if len(rows) == 1 else rows)
            recorded = [
                RecordedEvent(**(row | {"position": r.position, "ledger_hash": r.ledger_hash}))
                for r, row in zip(result, rows, strict=True)
            ]
            if not self._postgres:  # the Merkle tree grows with the ledger order (0020)
                grow_at_write(self.conn, recorded)
            view = None
            for projection in self._projections:
                if projection.handles(recorded[0].type):
                    view = projection.apply(self.conn, recorded) or view
        return Appended(recorded, view)

    def _check_across_partitions(self, stream_id: str, rows: Sequence[dict[str, Any]]) -> None:
        closing = any(row["type"] in TERMINAL_EVENT_TYPES for row in rows)
        ids = [row["event_id"] for row in rows]
        params = {"stream_id": stream_id, "closing": closing, "event_ids": ids}
        with translated(stream_id=stream_id):
            terminal, duplicate = self.conn.execute(_TERMINAL_OR_DUPLICATE, params).one()
        if terminal:
            raise AlreadyTerminalError(stream_id)
        if duplicate:
            raise DuplicateEventError(str(ids[0]))

    def _check_key_across_partitions(self, stream_id: str, new_events: Sequence[NewEvent]) -> None:
        payload = new_events[0].payload
        key = getattr(payload, "idempotency_key", None)
        if not isinstance(payload, JobAccepted) or not key:
            return
        with translated(stream_id=stream_id):
            held = self.conn.execute(_KEY_HELD, {"account": payload.account, "key": key}).first()
        if held is not None:
            raise IdempotencyKeyTakenError(
                f"the idempotency key is held by job {held.job_id} of account {payload.account}"
            )

    def jobs_by_id(self, job_ids: Sequence[str]) -> dict[str, JobView]:
        """On Postgres one statement through psycopg, each view parsed once from its text
        (a claim's read: SQLAlchemy's statement work cost as much as the round trip)."""
        if not self._postgres:
            return super().jobs_by_id(job_ids)
        driver = self.conn.connection.driver_connection
        assert isinstance(driver, psycopg.Connection)
        with translated():
            # Planned at each claim, never from a plan cached while the newest window of `jobs`
            # was small (it would scan it whole: loop_reads.POINT_READS).
            rows = driver.execute(_JOBS_TEXT, (list(job_ids),), prepare=False).fetchall()
        views = (JobView.model_validate_json(row[0]) for row in rows)
        return {view.job_id: view for view in views}

    def append_jobs(self, items: Sequence[JobAppend]) -> list[JobAppended]:
        """On Postgres, one statement for the whole batch (`outcomes_append_jobs`)."""
        if not self._postgres or not all(job_batch.fast(item) for item in items):
            return super().append_jobs(items)

        # On the transaction's own psycopg connection: SQLAlchemy's statement work would be
        # client time spent holding the stream locks, which the call took.
        driver = self.conn.connection.driver_connection
        return job_batch.run(items, now(), lambda body: call_batch(driver, body))

    @contextmanager
    def isolated(self) -> Iterator[None]:
        with self.conn.begin_nested():
            yield

    def lock(self, *key: str, shared: bool = False) -> None:
        lock(self.conn, key, shared=shared)

    def _lock_stream(self, stream_id: str, new_events: Sequence[NewEvent]) -> None:
        """On Postgres, the locks `outcomes_append_jobs` takes for the same write: the append
        lock shared, then the stream's lock, and a new job's idempotency key."""
        if not self._postgres:
            return  # BEGIN IMMEDIATE already serializes every writer
        if not self._appending:
            self.conn.execute(_LOCK_SHARED, {"k": APPEND_LOCK_KEY})
            self._appending = True
        lock(self.conn, ("stream", stream_id))
        payload = new_events[0].payload
        key = getattr(payload, "idempotency_key", None)
        if isinstance(payload, JobAccepted) and key:
            lock(self.conn, ("idempotency", payload.account, key))

    def start_lease(self, job_id: str, attempt: int, worker: str, expires_at: datetime) -> None:
        values = {"job_id": job_id, "attempt": attempt, "worker": worker, "expires_at": expires_at}
        self.conn.execute(self.lease_upsert, values)

    def renew_leases(self, held: Sequence[tuple[str, int]], expires_at: datetime) -> list[bool]:
        if not held:
            return []
        pairs = list(dict.fromkeys(held))
        result = self.conn.execute(_RENEW, {"held": pairs, "expires_at": expires_at})
        renewed = {(row.job_id, row.attempt) for row in result}
        return [pair in renewed for pair in held]

    def drop_lease(self, job_id: str, attempt: int) -> None:
        self.conn.execute(_DROP, {"job_id": job_id, "attempt": attempt})

    def iter_events(self, batch: int = 5000) -> Iterator[RecordedEvent]:
        """Every event in position order, keyset-paged, inside this transaction."""

        def read(after: int, limit: int) -> Sequence[RowT]:
            with translated():
                return self.conn.execute(PAGE, {"after": after, "limit": limit}).all()

        return (row_to_event(row) for row in pages(read, batch))

"""The SQL event store (Postgres and SQLite): append with an expected version, read, tail.

Positions taken at insert become visible in commit order, not insert order, so a reader
tailing "after position N" of `events` would skip a lower position that commits after a higher
one. On Postgres writers commit concurrently (each holds only its streams' and keys' locks),
and the sequencer gives every committed event its ledger position after commit
(`outcomes_sequence`, ledger.services.sequencer): readers in ledger order read `ledger_events`,
and a tailing read first has the events committed before it sequenced (`sequence`,
`Store.in_order`). SQLite
writers are serialized by BEGIN IMMEDIATE, so it sequences at write: each event's position is
its ledger position and the store links it as it writes it. Read models are updated inside
the same transaction.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import psycopg
from sqlalchemy import (
    Connection,
    Engine,
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
    SchemaMissingError,
)
from ledger.events import TERMINAL_EVENT_TYPES, JobAccepted, NewEvent, RecordedEvent
from ledger.job_view import JobView
from ledger.persistence import job_batch, privileges
from ledger.persistence.appends import Appended, JobAppend, JobAppended
from ledger.persistence.base import (
    Listener,
    OnConnect,
    OnJobs,
    Reads,
    Store,
    Writes,
)
from ledger.persistence.engine import READ_ONLY, libpq_dsn
from ledger.persistence.errors import translated
from ledger.persistence.locks import lock
from ledger.persistence.loop_reads import LoopJobReads, job_answer, job_statement
from ledger.persistence.projections import Projection, default_projections
from ledger.persistence.schema import (
    REQUEST_KEY,
    SCHEMA_REVISION,
    archives,
    events,
    jobs,
    leases,
    ledger_meta,
)
from ledger.persistence.sequencer_session import scalar
from ledger.persistence.sql_archive import SqlArchives
from ledger.persistence.sql_audit import SqlAuditWrites
from ledger.persistence.sql_counts import compact
from ledger.persistence.sql_fairness import take_submit_token
from ledger.persistence.sql_outbox import SqlOutboxWrites
from ledger.persistence.sql_reads import SqlReads
from ledger.persistence.sql_rebuild import SqlRebuildWrites
from ledger.persistence.sql_rows import PAGE, row_to_event, sqlite_has_table
from ledger.persistence.sql_sequencing import SqlSequencing
from ledger.persistence.sql_tree import grow_at_write
from ledger.persistence.sql_webhooks import SqlWebhookWrites
from ledger.privileges import ConnectedRole

if TYPE_CHECKING:
    from ledger.persistence.sql_rows import RowT

# pg_advisory_xact_lock key for appends ("outc" "appd"): every append takes it shared. Nothing
# takes it exclusive any more (the rebuild is online: it takes the streams' own locks, a page
# at a time); it stays so that a server of an older release and this one share one number.
APPEND_LOCK_KEY = 0x6F757463_61707064 & 0x7FFFFFFFFFFFFFFF
PARTITIONS_AHEAD = 2  # at migrate (the sequencer's leader keeps OUTCOMES_PARTITIONS_AHEAD)

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


def _call_batch(conn: Any, body: str) -> Any:
    """One `outcomes_append_jobs` call on a psycopg connection (a prepared statement): the
    server's answer."""
    assert isinstance(conn, psycopg.Connection)
    return scalar(conn, job_batch.CALL, (body,))


def _lease_upsert(dialect: str) -> Any:
    """INSERT … ON CONFLICT (job_id) DO UPDATE: a new attempt replaces a lingering lease."""
    builder = postgresql.insert if dialect == "postgresql" else sqlite.insert
    stmt = builder(leases)
    columns = {c: stmt.excluded[c] for c in ("attempt", "worker", "expires_at")}
    return stmt.on_conflict_do_update(index_elements=[leases.c.job_id], set_=columns)


_JOBS_TEXT = "SELECT view::text FROM jobs WHERE job_id = ANY(%s)"
# Readiness: a trivial statement; and, until it has been seen once, the schema's revision.
_PING = text("SELECT 1")
_REVISION = text("SELECT version_num FROM alembic_version")


def _last_ledger_hash(conn: Connection) -> str | None:
    """SQLite: the ledger-wide link of the ledger's last event, in the database or, when an
    archive removed it, in the newest archive (`_LAST_LEDGER_HASH_ARCHIVED`). A database not yet
    migrated to archives (0018) has only its rows; once seen to have them, not asked again."""
    if not sqlite_has_table(conn, "archives"):
        return conn.execute(_LAST_LEDGER_HASH).scalar()
    return conn.execute(_LAST_LEDGER_HASH_ARCHIVED).scalar()


def _pages(read: Callable[[int, int], Sequence[RowT]], batch: int) -> Iterator[RowT]:
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
        self._lease_upsert = upsert
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
            rows = driver.execute(_JOBS_TEXT, (list(job_ids),)).fetchall()
        views = (JobView.model_validate_json(row[0]) for row in rows)
        return {view.job_id: view for view in views}

    def append_jobs(self, items: Sequence[JobAppend]) -> list[JobAppended]:
        """On Postgres, one statement for the whole batch (`outcomes_append_jobs`)."""
        if not self._postgres or not all(job_batch.fast(item) for item in items):
            return super().append_jobs(items)

        # On the transaction's own psycopg connection: SQLAlchemy's statement work would be
        # client time spent holding the stream locks, which the call took.
        driver = self.conn.connection.driver_connection
        return job_batch.run(items, now(), lambda body: _call_batch(driver, body))

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
        self.conn.execute(self._lease_upsert, values)

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

        return (row_to_event(row) for row in _pages(read, batch))


class SqlStore(SqlSequencing, SqlArchives, Store):
    def __init__(self, engine: Engine, projections: Sequence[Projection] | None = None) -> None:
        self.engine = engine
        self.dialect = engine.dialect.name
        self.projections = list(default_projections() if projections is None else projections)
        self._lease_upsert = _lease_upsert(self.dialect)
        self._schema_seen = False  # the schema's revision was found current once

    @contextmanager
    def transaction(self) -> Iterator[SqlWrites]:
        with translated(), self.engine.begin() as conn:
            yield SqlWrites(conn, self.projections, self._lease_upsert)

    @contextmanager
    def connection(self) -> Iterator[Connection]:
        """A raw read-only connection in a transaction (tests and benchmarks inspect tables)."""
        with translated(), self.engine.connect() as conn:
            conn = conn.execution_options(**{READ_ONLY: True})
            with conn.begin():
                yield conn

    @contextmanager
    def reading(self) -> Iterator[Reads]:
        with self.connection() as conn, translated():
            yield SqlReads(conn)

    @contextmanager
    def snapshot(self) -> Iterator[Reads]:
        """On Postgres one REPEATABLE READ transaction: every statement sees the moment of the
        first (the events committed before it sequenced first, so its ledger order is whole).
        SQLite's read transaction (WAL) already keeps the snapshot of its first read."""
        self.sequence()
        if self.dialect != "postgresql":
            with self.reading() as reads:
                yield reads
            return
        with translated(), self.engine.connect() as conn:
            conn = conn.execution_options(
                isolation_level="REPEATABLE READ", postgresql_readonly=True
            )
            with conn.begin():
                yield SqlReads(conn)

    @contextmanager
    def quick_read(self) -> Iterator[Reads]:
        """On Postgres one statement runs in autocommit: it is atomic on its own, and the
        BEGIN and COMMIT round trips of a read transaction would triple what the hot reads
        cost. SQLite reads stay in a read transaction (local: no round trips to save)."""
        if self.dialect != "postgresql":
            with self.reading() as reads:
                yield reads
            return
        with translated(), self.engine.connect() as conn:
            yield SqlReads(conn.execution_options(isolation_level="AUTOCOMMIT"))

    def read_job(self, job_id: str, token_id: str | None = None) -> tuple[JobView | None, bool]:
        """On Postgres one statement through psycopg, the view parsed once from its text:
        SQLAlchemy's checkout, execution and result rows cost twice what the read does."""
        if self.dialect != "postgresql":
            return super().read_job(job_id, token_id)
        statement, params = job_statement(job_id, token_id)
        row = self._autocommit(lambda conn: conn.execute(statement, params).fetchone())
        return job_answer(row, token_id)

    def loop_job_reads(self) -> LoopJobReads | None:
        if self.dialect != "postgresql":
            return None
        return LoopJobReads(libpq_dsn(self.engine))

    def _read_page(self, after: int, limit: int) -> Sequence[RowT]:
        with self.connection() as conn, translated():
            return conn.execute(PAGE, {"after": after, "limit": limit}).all()

    def iter_events(self, batch: int = 5000) -> Iterator[RecordedEvent]:
        self.sequence()
        return (row_to_event(row) for row in _pages(self._read_page, batch))

    def append_jobs(self, items: Sequence[JobAppend]) -> list[JobAppended]:
        """On Postgres, one round trip: the batch is one statement in its own (autocommit)
        transaction, so the append lock is held for that statement and its commit only."""
        if self.dialect != "postgresql" or not all(job_batch.fast(item) for item in items):
            return super().append_jobs(items)
        return job_batch.run(items, now(), self._call_alone)

    def _call_alone(self, body: str) -> Any:
        return self._autocommit(lambda conn: _call_batch(conn, body))

    def _autocommit(self, call: Callable[[psycopg.Connection[Any]], Any]) -> Any:
        # psycopg directly, in autocommit: SQLAlchemy's per-statement work would cost as much
        # client time as the statement itself on this path (bench.append, bench.roundtrips).
        with translated():  # connecting fails too while the server is away
            pooled = self.engine.raw_connection()
        try:
            conn = pooled.driver_connection
            assert isinstance(conn, psycopg.Connection)
            try:
                with translated():
                    conn.autocommit = True
                    answer = call(conn)
                    conn.autocommit = False  # as the pool lends it to SQLAlchemy
            except BaseException:
                pooled.invalidate()  # in whatever state the failure left it: never again
                raise
        finally:
            pooled.close()
        return answer

    def take_submit_token(self, account: str, rate_per_s: float, burst: int) -> float:
        return take_submit_token(self.engine, account, rate_per_s, burst)

    def request_key(self) -> bytes:
        query = select(ledger_meta.c.value).where(ledger_meta.c.key == REQUEST_KEY)
        with self.connection() as conn, translated():
            value = conn.execute(query).scalar()
        if value is None:
            raise SchemaMissingError("this ledger has no request key: run `outcomes migrate`")
        return bytes.fromhex(value)

    def compact_counts(self) -> int:
        if self.dialect != "postgresql":
            return 0
        with self._one_statement() as conn:
            return compact(conn)

    @contextmanager
    def _one_statement(self) -> Iterator[Connection]:
        """A pooled connection for a statement that needs no transaction around it: in
        autocommit on Postgres (no BEGIN and COMMIT round trips), a read transaction on SQLite
        (local, and never BEGIN IMMEDIATE: it must not queue behind a writer)."""
        if self.dialect != "postgresql":
            with self.connection() as conn:
                yield conn
            return
        with translated(), self.engine.connect() as conn:
            yield conn.execution_options(isolation_level="AUTOCOMMIT")

    def check_ready(self) -> None:
        with self._one_statement() as conn:
            if self._schema_seen:
                conn.execute(_PING)
                return
            found = conn.execute(_REVISION).scalar()
        if found is None:
            raise SchemaMissingError("the ledger has no schema yet: run `outcomes migrate`")
        # Revision ids are numbered in order; a newer schema (migrated ahead of a rolling
        # deploy) serves this code too, an older one lacks what it reads.
        if str(found) < SCHEMA_REVISION:
            raise SchemaMissingError(
                f"the ledger's schema is at revision {found}, this code needs {SCHEMA_REVISION}:"
                " run `outcomes migrate`"
            )
        self._schema_seen = True

    def upgrade_schema(self) -> tuple[str | None, str | None]:
        from ledger.persistence import migrate  # Alembic is loaded only by who migrates

        before = migrate.current_revision(self.engine)
        migrate.upgrade(self.engine)
        self.make_partitions(PARTITIONS_AHEAD)  # the writers' room, made before they need it
        return before, migrate.current_revision(self.engine)

    def connected_role(self) -> ConnectedRole | None:
        if self.dialect != "postgresql":
            return None
        with self.connection() as conn:
            return privileges.connected_role(conn)

    def grant_app_role(self, role: str, password: str | None = None) -> None:
        if self.dialect != "postgresql":
            return super().grant_app_role(role, password)
        from ledger.persistence import migrate  # Alembic is loaded only by who migrates

        migrate.grant(self.engine, role, password)

    def grant_script(self, role: str) -> str:
        if self.dialect != "postgresql":
            return super().grant_script(role)
        from ledger.persistence import migrate

        return migrate.grant_script(self.engine, role)

    def job_listener(self, on_jobs: OnJobs, on_connect: OnConnect) -> Listener | None:
        if self.dialect != "postgresql":
            return None
        from ledger.persistence.notify_listener import JobListener

        return JobListener(libpq_dsn(self.engine), on_jobs, on_connect)

    def describe(self) -> str:
        return self.engine.url.render_as_string(hide_password=True)

    def local_folder(self) -> Path | None:
        database = self.engine.url.database
        if self.dialect != "sqlite" or not database or database == ":memory:":
            return None
        return Path(database).parent

    def close(self) -> None:
        self.engine.dispose()

"""The SQL event store (Postgres and SQLite): append with an expected version, read, tail.

Positions taken at insert become visible in commit order, not insert order, so a reader
tailing "after position N" of `events` would skip a lower position that commits after a higher
one. On Postgres writers commit concurrently (each holds only its streams' and keys' locks),
and the sequencer gives every committed event its ledger position after commit
(`outcomes_sequence`, ledger.runtime.sequencer): readers in ledger order read `ledger_events`,
and a tailing read first has the events committed before it sequenced (`sequence`,
`Store.in_order`). SQLite
writers are serialized by BEGIN IMMEDIATE, so it sequences at write: each event's position is
its ledger position and the store links it as it writes it. Read models are updated inside
the same transaction.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import psycopg
from sqlalchemy import (
    Connection,
    Engine,
    select,
    text,
)

from ledger.clock import now
from ledger.errors import (
    SchemaMissingError,
)
from ledger.events import RecordedEvent
from ledger.job_view import JobView
from ledger.persistence import job_batch, privileges
from ledger.persistence.appends import JobAppend, JobAppended
from ledger.persistence.base import (
    Listener,
    OnConnect,
    OnJobs,
    Reads,
    Store,
)
from ledger.persistence.engine import READ_ONLY, changes_bells, libpq_dsn
from ledger.persistence.errors import translated
from ledger.persistence.loop_reads import POINT_READS, LoopJobReads, job_answer, job_statement
from ledger.persistence.projections import Projection, default_projections
from ledger.persistence.schema import (
    REQUEST_KEY,
    SCHEMA_REVISION,
    ledger_meta,
)
from ledger.persistence.sql_archive import SqlArchives
from ledger.persistence.sql_counts import compact
from ledger.persistence.sql_fairness import take_submit_token
from ledger.persistence.sql_reads import SqlReads
from ledger.persistence.sql_rows import PAGE, row_to_event
from ledger.persistence.sql_sequencing import SqlSequencing
from ledger.privileges import ConnectedRole

if TYPE_CHECKING:
    from ledger.persistence.sql_rows import RowT
from ledger.persistence.sql_writes import (
    APPEND_LOCK_KEY,
    SqlWrites,
    call_batch,
    lease_upsert,
    pages,
)

__all__ = ["APPEND_LOCK_KEY", "PARTITIONS_AHEAD", "SqlStore", "SqlWrites"]

PARTITIONS_AHEAD = 2  # at migrate (the sequencer's leader keeps OUTCOMES_PARTITIONS_AHEAD)
# Readiness: a trivial statement; and, until it has been seen once, the schema's revision.
_PING = text("SELECT 1")
_REVISION = text("SELECT version_num FROM alembic_version")


class SqlStore(SqlSequencing, SqlArchives, Store):
    def __init__(self, engine: Engine, projections: Sequence[Projection] | None = None) -> None:
        self.engine = engine
        self.dialect = engine.dialect.name
        self.projections = list(default_projections() if projections is None else projections)
        self.lease_upsert = lease_upsert(self.dialect)
        self._schema_seen = False  # the schema's revision was found current once

    @contextmanager
    def transaction(self) -> Iterator[SqlWrites]:
        with translated(), self.engine.begin() as conn:
            yield SqlWrites(conn, self.projections, self.lease_upsert)

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

        # Planned at each read (never a plan the pool's connection cached while the newest
        # window of `jobs` was small, which would scan it whole: loop_reads.POINT_READS).
        def read(conn: psycopg.Connection[Any]) -> Any:
            return conn.execute(statement, params, prepare=False).fetchone()

        return job_answer(self._autocommit(read), token_id)

    def loop_job_reads(self) -> LoopJobReads | None:
        if self.dialect != "postgresql":
            return None
        return LoopJobReads(libpq_dsn(self.engine, *POINT_READS))

    def _read_page(self, after: int, limit: int) -> Sequence[RowT]:
        with self.connection() as conn, translated():
            return conn.execute(PAGE, {"after": after, "limit": limit}).all()

    def iter_events(self, batch: int = 5000) -> Iterator[RecordedEvent]:
        self.sequence()
        return (row_to_event(row) for row in pages(self._read_page, batch))

    def append_jobs(self, items: Sequence[JobAppend]) -> list[JobAppended]:
        """On Postgres, one round trip: the batch is one statement in its own (autocommit)
        transaction, so the append lock is held for that statement and its commit only."""
        if self.dialect != "postgresql" or not all(job_batch.fast(item) for item in items):
            return super().append_jobs(items)
        return job_batch.run(items, now(), self._call_alone)

    def _call_alone(self, body: str) -> Any:
        return self._autocommit(lambda conn: call_batch(conn, body))

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

    def changes_bells(self) -> Path | None:
        return changes_bells(self.engine)

    def describe(self) -> str:
        return self.engine.url.render_as_string(hide_password=True)

    def local_folder(self) -> Path | None:
        database = self.engine.url.database
        if self.dialect != "sqlite" or not database or database == ":memory:":
            return None
        return Path(database).parent

    def close(self) -> None:
        self.engine.dispose()

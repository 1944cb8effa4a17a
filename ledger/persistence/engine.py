"""Engines for the two supported databases, set up for a ledger's access pattern.

SQLite (the embedded default) is shared by several processes: WAL, a busy timeout, and writes
in BEGIN IMMEDIATE so that writers queue instead of failing mid-transaction and commit order
equals position order.
"""

from __future__ import annotations

import os
import sqlite3
from contextlib import suppress
from pathlib import Path
from typing import Any

import orjson
from psycopg.conninfo import make_conninfo
from sqlalchemy import Engine, create_engine, event
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError

from ledger import doorbell
from ledger.errors import ConfigurationError

READ_ONLY = "ledger_read_only"  # execution option: plain BEGIN (SQLite readers don't queue)


def _json_dumps(value: Any) -> str:
    return orjson.dumps(value).decode()


def normalize_url(url: str) -> str:
    """Accept `postgresql://` and `postgres://` as psycopg 3 URLs."""
    for prefix in ("postgresql://", "postgres://", "postgresql+psycopg2://"):
        if url.startswith(prefix):
            return "postgresql+psycopg://" + url[len(prefix) :]
    return url


def libpq_dsn(engine: Engine, *settings: str) -> str:
    """A libpq connection string for a Postgres engine's database: what psycopg's own
    connections (LISTEN, the event loop's reads) take; `settings` ("name=value") are set for
    the connection's life, after the URL's own options."""
    url = engine.url.set(drivername="postgresql")
    options = " ".join([without_jit(url.query.get("options")), *(f"-c {s}" for s in settings)])
    plain = url.difference_update_query(["options"]).render_as_string(hide_password=False)
    return make_conninfo(plain, options=options)  # libpq URIs read "+" as itself, not a space


def without_jit(options: str | tuple[str, ...] | None) -> str:
    """libpq `options` that turn Postgres's JIT off, after any the URL gives. The planner
    prices a page over a partitioned table (LIMIT 2000 of a merge over every partition) at the
    whole scan's cost, so JIT compiles hundreds of functions for a query that runs in
    milliseconds: measured 100 ms of compiling for 26 ms of work a page at 11 partitions, and
    seconds at 30, which made a streaming `audit verify` of 1M jobs take over an hour."""
    given = " ".join(options) if isinstance(options, tuple) else (options or "")
    return f"{given} -c jit=off".strip()


def make_engine(url: str, *, pool_size: int = 5) -> Engine:
    try:
        parsed = make_url(normalize_url(url))
    except ArgumentError as exc:
        raise ConfigurationError(f"bad database URL: {exc}") from None
    backend = parsed.get_backend_name()
    common: dict[str, Any] = {"json_serializer": _json_dumps, "json_deserializer": orjson.loads}
    if backend == "postgresql":
        if parsed.get_driver_name() != "psycopg":
            raise ConfigurationError("PostgreSQL URLs must use psycopg 3: postgresql+psycopg://")
        return create_engine(
            parsed,
            pool_size=pool_size,
            max_overflow=pool_size,
            pool_recycle=3600,
            connect_args={"options": without_jit(parsed.query.get("options"))},
            **common,
        )
    if backend == "sqlite":
        return _sqlite_engine(parsed.render_as_string(hide_password=False), common)
    raise ConfigurationError(f"unsupported database {backend!r}: use postgresql or sqlite")


def create_private(database: Path) -> None:
    """The ledger holds every account's jobs and the tokens' hashes: a folder it creates is
    0700 and a file it creates 0600 (SQLite gives its -wal and -shm files the file's mode).
    What already exists keeps the mode its owner gave it."""
    database.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    with suppress(FileExistsError):  # exclusive: an existing file (maybe read-only) untouched
        os.close(os.open(database, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600))


def changes_bells(engine: Engine) -> Path | None:
    """The folder of bells a SQLite ledger's writers ring after each commit that changed a row
    (`ledger.doorbell`): what wakes the API's long-polls there. None for Postgres (its NOTIFY
    pushes the changes) and for a SQLite database with no file of its own."""
    file = _file_of(engine.url.database) if engine.dialect.name == "sqlite" else None
    return _bells_beside(file) if file is not None else None


def _file_of(database: str | None) -> Path | None:
    """The file of a SQLite database; None for one in memory or named by a `file:` URI."""
    if not database or database == ":memory:" or database.startswith("file:"):
        return None
    return Path(database)


def _bells_beside(file: Path) -> Path:
    return file.with_name(file.name + "-bells")


def _ringing(bells: Path) -> type[sqlite3.Connection]:
    """A SQLite connection that rings `bells` after a commit that changed a row."""

    class RingingConnection(sqlite3.Connection):
        _rung_at = 0  # total_changes when it last rang

        def commit(self) -> None:
            super().commit()
            if self.total_changes != self._rung_at:
                self._rung_at = self.total_changes
                doorbell.ring(bells)

    return RingingConnection


def _sqlite_engine(url: str, common: dict[str, Any]) -> Engine:
    database = make_url(url).database
    connect_args: dict[str, Any] = {"timeout": 60}
    file = _file_of(database)
    if file is not None:
        create_private(file)
        if doorbell.supported():
            connect_args["factory"] = _ringing(_bells_beside(file))
    engine = create_engine(url, connect_args=connect_args, **common)

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        dbapi_connection.isolation_level = None  # we issue BEGIN ourselves
        cursor = dbapi_connection.cursor()
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute("PRAGMA busy_timeout=60000")
        cursor.execute("PRAGMA synchronous=NORMAL")
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.close()

    @event.listens_for(engine, "begin")
    def _on_begin(connection: Any) -> None:
        read_only = connection.get_execution_options().get(READ_ONLY, False)
        connection.exec_driver_sql("BEGIN" if read_only else "BEGIN IMMEDIATE")

    return engine

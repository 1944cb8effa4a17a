"""The SQLite ledger is private to its owner: a folder it creates is 0700, its files 0600."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from ledger.persistence import migrate
from ledger.persistence.engine import libpq_dsn, make_engine


@pytest.fixture
def permissive_umask() -> Iterator[None]:
    """The common umask: without an explicit mode, files would be world-readable."""
    previous = os.umask(0o022)
    try:
        yield
    finally:
        os.umask(previous)


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.mark.usefixtures("permissive_umask")
def test_a_new_sqlite_ledger_is_readable_by_its_owner_only(tmp_path: Path) -> None:
    tmp_path.chmod(0o755)
    database = tmp_path / "home" / "ledger.db"
    engine = make_engine(f"sqlite:///{database}")
    try:
        migrate.upgrade(engine)
        with engine.connect():  # the -wal and -shm files exist while a connection is open
            sidecars = {p.name: mode(p) for p in database.parent.glob("ledger.db-*")}
    finally:
        engine.dispose()
    assert (mode(database.parent), mode(database)) == (0o700, 0o600)
    assert sidecars == {"ledger.db-wal": 0o600, "ledger.db-shm": 0o600}
    assert mode(tmp_path) == 0o755  # a folder it did not create keeps its mode


@pytest.mark.usefixtures("permissive_umask")
def test_an_existing_ledger_file_keeps_its_owners_mode(tmp_path: Path) -> None:
    database = tmp_path / "ledger.db"
    database.touch(mode=0o640)
    database.chmod(0o640)
    make_engine(f"sqlite:///{database}").dispose()
    assert mode(database) == 0o640


@pytest.mark.postgres
def test_postgres_connections_run_without_jit_and_keep_the_urls_options(pg_database: str) -> None:
    """A page over partitioned tables is priced at the whole scan's cost: with JIT on, each
    page compiled for seconds (`ledger.persistence.engine.without_jit`). Both kinds of
    connection the product makes turn it off, and options the URL gives still apply."""
    url = f"{pg_database}?options=-c%20work_mem%3D7MB"
    engine = make_engine(url)
    try:
        with engine.connect() as conn:
            pooled = (
                conn.exec_driver_sql("SHOW jit").scalar(),
                conn.exec_driver_sql("SHOW work_mem").scalar(),
            )
        with psycopg.connect(libpq_dsn(engine)) as raw:
            own = tuple(raw.execute(f"SHOW {name}").fetchone()[0] for name in ("jit", "work_mem"))  # type: ignore[index]
    finally:
        engine.dispose()
    assert pooled == ("off", "7MB")
    assert own == ("off", "7MB")

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from ledger.persistence import migrate
from ledger.persistence.engine import make_engine
from ledger.persistence.open import open_store
from ledger.persistence.store import EventStore
from tests.databases import (
    create_database,
    drop_database,
    pg_url,
    require_postgres,
    unique_name,
)

BACKENDS = ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]


@pytest.fixture(scope="session")
def pg_template() -> Iterator[str]:
    """A migrated Postgres database that per-test databases are cloned from."""
    require_postgres()
    name = unique_name("outcomes_tmpl")
    create_database(name)
    engine = make_engine(pg_url(name))
    migrate.upgrade(engine)
    engine.dispose()
    yield name
    drop_database(name)


@pytest.fixture
def pg_database(request: pytest.FixtureRequest) -> Iterator[str]:
    """URL of a fresh, migrated Postgres database, dropped after the test."""
    template = request.getfixturevalue("pg_template")
    name = unique_name("outcomes_t")
    create_database(name, template=template)
    yield pg_url(name)
    drop_database(name)


@pytest.fixture
def sqlite_database(tmp_path: Path) -> str:
    """URL of a fresh, migrated SQLite ledger file."""
    url = f"sqlite:///{tmp_path / 'ledger.db'}"
    engine = make_engine(url)
    migrate.upgrade(engine)
    engine.dispose()
    return url


@pytest.fixture(params=BACKENDS)
def database_url(request: pytest.FixtureRequest) -> str:
    """A migrated ledger database on each backend in turn (the contract suites use this)."""
    name = "sqlite_database" if request.param == "sqlite" else "pg_database"
    url: str = request.getfixturevalue(name)
    return url


@pytest.fixture
def store(database_url: str) -> Iterator[EventStore]:
    ledger = open_store(database_url)
    yield ledger
    ledger.engine.dispose()

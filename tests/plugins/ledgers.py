"""Ledgers for tests: per-test databases on each backend, stores, and use-case handles."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from ledger.persistence import migrate
from ledger.persistence.base import Store
from ledger.persistence.engine import make_engine
from ledger.persistence.memory import MemoryStore
from ledger.persistence.sql_store import SqlStore
from ledger.runtime.ledger import Ledger
from tests.databases import (
    APP_ROLE,
    as_role,
    create_database,
    drop_database,
    pg_url,
    require_postgres,
    unique_name,
)

# The key every ledger of the test process seals declared secrets with (a PostgreSQL ledger has
# none of its own); the processes the tests start get it through their environment, except on
# embedded defaults, where they use the key file beside the ledger (ledger/keyring.py).
SECRETS_KEY = "tests1:" + "dGVzdHMtb25seS1rZXktLS0tLS0tLS0tLS0tLS0tLS0"
os.environ.setdefault("OUTCOMES_SECRETS_KEY", SECRETS_KEY)

BACKENDS = ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]
STORES = ["memory", *BACKENDS]


@pytest.fixture(scope="session")
def pg_template() -> Iterator[str]:
    """A migrated Postgres database that per-test databases are cloned from, migrated by its
    owner with the application role's grants (`outcomes migrate --app-role`): clones keep them."""
    require_postgres()
    name = unique_name("outcomes_tmpl")
    create_database(name)
    engine = make_engine(pg_url(name))
    migrate.upgrade(engine)
    migrate.grant(engine, APP_ROLE)
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
def pg_app_url(pg_database: str) -> str:
    """The same fresh database, connecting as the application role (not its owner)."""
    return as_role(pg_database)


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
def store(database_url: str) -> Iterator[SqlStore]:
    with SqlStore(make_engine(database_url)) as opened:
        yield opened


@pytest.fixture
def ledger(store: SqlStore) -> Ledger:
    """The same store, as the use cases take it."""
    return Ledger(store)


@pytest.fixture(params=STORES)
def any_store(request: pytest.FixtureRequest) -> Iterator[Store]:
    """Each store in turn: memory, SQLite, Postgres (the store contract runs on all three)."""
    if request.param == "memory":
        yield MemoryStore()
        return
    url = request.getfixturevalue("sqlite_database" if request.param == "sqlite" else "pg_database")
    with SqlStore(make_engine(url)) as opened:
        yield opened


@pytest.fixture
def memory_ledger() -> Ledger:
    """A ledger in memory: the use cases' tests run in milliseconds, without services."""
    return Ledger(MemoryStore())

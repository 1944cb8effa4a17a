"""A SQLite ledger's writers ring its bells after each commit that changed a row, so that a
process waiting on the ledger (the API's long-polls) looks at once; a read rings nothing.
Postgres pushes its changes by NOTIFY and has no bells."""

from __future__ import annotations

from pathlib import Path

import pytest

from ledger import doorbell
from ledger.persistence.engine import make_engine
from ledger.persistence.memory import MemoryStore
from ledger.persistence.sql_store import SqlStore
from ledger.runtime.ledger import Ledger
from ledger.services import jobs
from ledger.services.tokens import create as create_token


@pytest.mark.skipif(not doorbell.supported(), reason="bells need Linux")
def test_a_commit_on_sqlite_rings_and_a_read_does_not(sqlite_database: str) -> None:
    writer = SqlStore(make_engine(sqlite_database))  # another process's, as far as bells go
    waiter = SqlStore(make_engine(sqlite_database))
    try:
        folder = waiter.changes_bells()
        assert folder is not None
        assert folder == Path(sqlite_database.removeprefix("sqlite:///") + "-bells")
        bell = jobs.changes_bell(Ledger(waiter))
        assert bell is not None
        try:
            assert not bell.wait(0)
            issued = create_token(Ledger(writer), "acme", "agent", None, actor="tests")
            assert bell.wait(5)
            with writer.reading() as reads:
                assert reads.token(issued.view.token_id) is not None
            assert not bell.wait(0.1)  # the read committed nothing
        finally:
            bell.close()
        assert list(folder.iterdir()) == []
    finally:
        writer.close()
        waiter.close()


def test_postgres_and_memory_have_no_bells(pg_database: str) -> None:
    store = SqlStore(make_engine(pg_database))
    try:
        assert store.changes_bells() is None
        assert jobs.changes_bell(Ledger(store)) is None
    finally:
        store.close()
    assert MemoryStore().changes_bells() is None

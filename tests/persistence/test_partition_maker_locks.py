"""0026: the partitions' maker gives up at once behind another transaction's lock.

Attaching a window of `jobs` locks its default partition exclusively, and every query on `jobs`
queues behind that request while it waits. With a 5 s lock timeout, during a rebuild at 1M jobs
(whose pages hold the partition for seconds), each of the sequencer leader's attempts stopped
every agent's call for seconds. The maker now waits 50 ms, fails, and the next call makes the
window."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from sqlalchemy import text

from ledger.errors import StorageError
from ledger.persistence.engine import make_engine
from ledger.persistence.sql_store import SqlStore

WINDOWS = "SELECT count(*) FROM jobs_partitions WHERE dropped_at IS NULL"
SETTINGS = "SELECT proconfig FROM pg_proc WHERE proname = 'outcomes_make_partitions'"


@pytest.fixture
def store(pg_database: str) -> Iterator[SqlStore]:
    with SqlStore(make_engine(pg_database, pool_size=3)) as opened:
        yield opened


def windows(store: SqlStore) -> int:
    with store.connection() as conn:
        return int(conn.execute(text(WINDOWS)).scalar_one())


def test_the_maker_waits_a_moment_for_a_lock_then_leaves_it_to_the_next_call(
    store: SqlStore,
) -> None:
    with store.connection() as conn:
        settings = conn.execute(text(SETTINGS)).scalar_one()
    assert "lock_timeout=50ms" in settings
    before = windows(store)
    with store.connection() as holder:  # a long reader of `jobs`, as a rebuild's page is
        holder.execute(text("SELECT count(*) FROM jobs"))
        with pytest.raises(StorageError):
            store.make_partitions(before + 2)  # a new window is due: it needs the lock
        # Nothing half made, and the holder's transaction goes on.
        assert holder.execute(text("SELECT count(*) FROM jobs")).scalar_one() == 0
    assert windows(store) == before
    assert store.make_partitions(before + 2) > 0  # the next call, the lock free, makes it
    assert windows(store) > before

"""The partitions' maker behind another transaction's lock.

0026: attaching a window of `jobs` locks its default partition exclusively, and every query on
`jobs` queues behind that request while it waits. With a 5 s lock timeout, during a rebuild at
1M jobs (whose pages hold the partition for seconds), each of the sequencer leader's attempts
stopped every agent's call for seconds. The maker now waits 50 ms and the next call makes the
window.

0027: giving up the window no longer undoes the partitions of `events` made in the same call. A
reader of `jobs` may hold it for as long as an `audit verify` reads (minutes at 1M jobs), and a
write with no partition of `events` to land in fails."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from sqlalchemy import text

from ledger.persistence.engine import make_engine
from ledger.persistence.sql_store import SqlStore

WINDOWS = "SELECT count(*) FROM jobs_partitions WHERE dropped_at IS NULL"
PARTITIONS = "SELECT count(*) FROM ledger_partitions"
SETTINGS = "SELECT proconfig FROM pg_proc WHERE proname = 'outcomes_make_partitions'"


@pytest.fixture
def store(pg_database: str) -> Iterator[SqlStore]:
    with SqlStore(make_engine(pg_database, pool_size=3)) as opened:
        yield opened


def count(store: SqlStore, query: str) -> int:
    with store.connection() as conn:
        return int(conn.execute(text(query)).scalar_one())


def test_the_maker_waits_a_moment_for_a_lock_then_leaves_the_window_to_the_next_call(
    store: SqlStore,
) -> None:
    with store.connection() as conn:
        settings = conn.execute(text(SETTINGS)).scalar_one()
    assert "lock_timeout=50ms" in settings
    windows, partitions = count(store, WINDOWS), count(store, PARTITIONS)
    ahead = max(windows, partitions) + 2  # a window and a partition of `events` are due
    with store.connection() as holder:  # a long reader of `jobs`, as a verify or a rebuild's page
        holder.execute(text("SELECT count(*) FROM jobs"))
        made = store.make_partitions(ahead)
        # The partitions of `events` are made; the window is not, and the holder goes on.
        assert holder.execute(text("SELECT count(*) FROM jobs")).scalar_one() == 0
        assert count(store, WINDOWS) == windows
        assert count(store, PARTITIONS) == partitions + made > partitions
    assert store.make_partitions(ahead) > 0  # the next call, the lock free, makes the window
    assert count(store, WINDOWS) > windows

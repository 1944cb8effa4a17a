"""The tables emptied all day stay small (ledger/persistence/sql_churn.py): the process that
folds the counts vacuums them when their dead rows pile up, as their owner; a role that does
not own them leaves them to autovacuum (and says nothing). This machine's CI server runs with
autovacuum off, so without it nothing would ever reclaim them here."""

from __future__ import annotations

import pytest
from sqlalchemy import Engine, text

from ledger.persistence import sql_churn
from ledger.persistence.appends import NO_STREAM
from ledger.persistence.engine import make_engine
from ledger.persistence.sql_store import SqlStore
from tests.concurrent_writers import wait_until
from tests.factories import accepted, fresh_job_stream, started, succeeded

pytestmark = pytest.mark.postgres


def _dead(engine: Engine, table: str) -> int:
    with engine.connect() as conn:
        found = conn.execute(
            text("SELECT n_dead_tup FROM pg_stat_user_tables WHERE relname = :t"), {"t": table}
        ).scalar_one()
    return int(found)


def _vacuums(engine: Engine, table: str) -> int:
    with engine.connect() as conn:
        found = conn.execute(
            text("SELECT vacuum_count FROM pg_stat_user_tables WHERE relname = :t"), {"t": table}
        ).scalar_one()
    return int(found)


def _write_jobs(store: SqlStore, jobs: int) -> None:
    for _ in range(jobs):
        store.append(fresh_job_stream(), [accepted(), started(), succeeded()], NO_STREAM)


def test_the_owner_vacuums_the_folded_deltas_once_they_pile_up(pg_database: str) -> None:
    store = SqlStore(make_engine(pg_database))
    try:
        _write_jobs(store, 5)
        with store.engine.connect() as conn:
            conn = conn.execution_options(isolation_level="AUTOCOMMIT")
            assert conn.execute(text("SELECT outcomes_compact_counts()")).scalar_one() > 0
            # The fold's DELETE left dead rows; the statistics see them within a second or so.
            wait_until(lambda: _dead(store.engine, "job_count_deltas") > 0, 30, "dead deltas")
            assert sql_churn.vacuum_churn(conn, dead=10**9) == []  # under the threshold
            assert _vacuums(store.engine, "job_count_deltas") == 0
            assert "job_count_deltas" in sql_churn.vacuum_churn(conn, dead=1)
        wait_until(lambda: _vacuums(store.engine, "job_count_deltas") == 1, 30, "the vacuum")
    finally:
        store.close()


def test_folding_the_counts_vacuums_at_most_every_few_seconds(pg_database: str) -> None:
    store = SqlStore(make_engine(pg_database))
    try:
        assert sql_churn.due(store.engine, now=1000.0)  # the first ask of this engine
        assert not sql_churn.due(store.engine, now=1000.0 + sql_churn.CHECK_EVERY_S / 2)
        assert sql_churn.due(store.engine, now=1000.0 + sql_churn.CHECK_EVERY_S)
    finally:
        store.close()


def test_the_application_role_leaves_the_tables_to_autovacuum(pg_app_url: str) -> None:
    """It does not own them: it asks for none (a VACUUM of them would be skipped anyway)."""
    store = SqlStore(make_engine(pg_app_url))
    try:
        _write_jobs(store, 5)
        assert store.compact_counts() > 0
        wait_until(lambda: _dead(store.engine, "job_count_deltas") > 0, 30, "dead deltas")
        with store.engine.connect() as conn:
            conn = conn.execution_options(isolation_level="AUTOCOMMIT")
            assert sql_churn.vacuum_churn(conn, dead=1) == []
    finally:
        store.close()

"""bench.throughput's sequencing lag on a real Postgres ledger: the probe sees committed,
unsequenced events; every event written after the head is counted once its position is given;
a held transaction has its own transaction id while the block runs; the report's lines."""

from __future__ import annotations

import uuid

import psycopg
import pytest

from bench._common import libpq_url
from bench.throughput_lag import (
    LAG_GOAL_MS,
    Lag,
    SequencingStalledError,
    held_open,
    lag_after,
    lag_lines,
    probing,
    write_head,
)
from ledger.events import job_stream
from ledger.persistence.appends import NO_STREAM
from tests.concurrent_writers import accepted_event, wait_until
from tests.factories import open_sql

pytestmark = pytest.mark.postgres


def _append_jobs(url: str, n: int) -> None:
    with open_sql(url) as store:
        for k in range(n):
            store.append(job_stream(uuid.uuid4()), [accepted_event(k)], NO_STREAM)


def test_every_event_after_the_head_is_measured_once_sequenced(pg_database: str) -> None:
    with psycopg.connect(libpq_url(pg_database), autocommit=True) as conn:
        _append_jobs(pg_database, 2)
        conn.execute("SELECT outcomes_sequence(true)")
        head = write_head(conn)
        with probing(pg_database) as probe:
            _append_jobs(pg_database, 5)
            wait_until(lambda: len(probe.first_seen) == 5, 10, "the probe to see 5 events")
            conn.execute("SELECT outcomes_sequence(true)")
            lag = lag_after(conn, head, probe)
    assert lag.events == 5 and set(probe.first_seen) == set(range(head + 1, head + 6))
    # Seen unsequenced before the tick: a positive wait, within the recorded -> position one.
    assert 0 < lag.commit_p50_ms <= lag.commit_max_ms <= lag.max_ms


def test_a_ledger_nobody_sequences_is_reported_not_measured(pg_database: str) -> None:
    with psycopg.connect(libpq_url(pg_database), autocommit=True) as conn:
        head = write_head(conn)
        _append_jobs(pg_database, 1)
        with probing(pg_database) as probe, pytest.raises(SequencingStalledError):
            lag_after(conn, head, probe, settle_s=0.2)


def test_the_held_transaction_has_an_id_until_the_block_ends(pg_database: str) -> None:
    query = (
        "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
        " AND backend_xid IS NOT NULL AND pid <> pg_backend_pid()"
    )
    with psycopg.connect(libpq_url(pg_database), autocommit=True) as conn:
        with held_open(pg_database):
            assert conn.execute(query).fetchone() == (1,)
        assert conn.execute(query).fetchone() == (0,)


def test_the_report_gives_both_measures_and_the_verdicts() -> None:
    plain = Lag(100, 20.0, 40.0, 50.0, 1.0, LAG_GOAL_MS - 1, 30.0)
    spells = (Lag(10, 1, 2, 3, 0.5, 9.0, 12.0), Lag(10, 1, 2, 3, 0.7, 30.0, 40.0))
    text = "\n".join(lag_lines(plain, spells, 30))
    assert "the rounds above, 100 events: commit -> position p50 1.0, p99 19.0" in text
    assert "-> met" in text and "one transaction held open throughout" in text
    assert "p99 30.0 vs 9.0 ms" in text
    assert "NOT met" in "\n".join(lag_lines(Lag(1, 0, 0, 0, 0, 99.0, 99.0), None, 0))

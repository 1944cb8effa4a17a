"""Why a tailing reader cannot read `events` by position, and how the store avoids it
(contract §2).

On a plain BIGSERIAL table, positions are handed out at insert but become visible at commit, so
a reader paging "after position N" skips a lower position committed late. SQLite serializes
writers (BEGIN IMMEDIATE), so its positions are in commit order. On Postgres writers do not wait
for each other: the sequencer gives each committed event its ledger position after commit, in
commit order, and readers tail ledger order.
"""

from __future__ import annotations

import threading
import uuid

import psycopg
import pytest

from ledger.events import RecordedEvent, job_stream
from ledger.persistence.appends import NO_STREAM
from ledger.persistence.sql_store import SqlStore
from tests.concurrent_writers import JOIN_TIMEOUT_S, accepted_event, psycopg_dsn
from tests.store_helpers import read_after


def _scalar(conn: psycopg.Connection[tuple[int]], sql: str) -> int:
    row = conn.execute(sql).fetchone()
    assert row is not None
    return int(row[0])


def _naive_read_after(conn: psycopg.Connection[tuple[int]], after: int) -> list[int]:
    rows = conn.execute(
        "SELECT position FROM scratch_log WHERE position > %s ORDER BY position", (after,)
    )
    return [int(row[0]) for row in rows]


@pytest.mark.postgres
def test_without_a_lock_a_reader_after_n_skips_a_lower_position_committed_late(
    pg_database: str,
) -> None:
    """The hazard of contract §2 on a plain BIGSERIAL table (not the ledger's): positions are
    handed out at insert but become visible at commit."""
    dsn = psycopg_dsn(pg_database)
    with psycopg.connect(dsn, autocommit=True) as admin:
        admin.execute("CREATE TABLE scratch_log (position BIGSERIAL PRIMARY KEY, note TEXT)")
    with (
        psycopg.connect(dsn) as slow,
        psycopg.connect(dsn) as fast,
        psycopg.connect(dsn, autocommit=True) as reader,
    ):
        low = _scalar(slow, "INSERT INTO scratch_log (note) VALUES ('slow') RETURNING position")
        high = _scalar(fast, "INSERT INTO scratch_log (note) VALUES ('fast') RETURNING position")
        fast.commit()  # the higher position commits first
        assert low < high

        first_page = _naive_read_after(reader, 0)
        assert first_page == [high]
        cursor = first_page[-1]
        slow.commit()  # now the lower one commits, below the reader's cursor
        second_page = _naive_read_after(reader, cursor)

        assert second_page == []
        assert _naive_read_after(reader, 0) == [low, high]
        assert low not in first_page + second_page  # the naive tail skipped it for good


def _sessions_waiting_on_a_lock(dsn: str) -> int:
    with psycopg.connect(dsn, autocommit=True) as conn:
        return _scalar(
            conn,
            "SELECT count(*) FROM pg_stat_activity"
            " WHERE datname = current_database() AND wait_event_type = 'Lock'",
        )


def test_an_uncommitted_append_never_lets_a_tailing_reader_skip_it(
    database_url: str, store: SqlStore
) -> None:
    """While transaction A holds an uncommitted append, B (another stream, another thread)
    appends. On SQLite B waits for A (BEGIN IMMEDIATE). On Postgres B commits at once, and the
    sequencer puts it first: a tailing reader sees B, and A after B once A commits, never
    skipping A although A took the lower write position."""
    stream_a, stream_b = job_stream(uuid.uuid4()), job_stream(uuid.uuid4())
    b_finished = threading.Event()
    b_recorded: list[RecordedEvent] = []
    b_errors: list[BaseException] = []

    def append_b() -> None:
        try:
            b_recorded.extend(store.append(stream_b, [accepted_event(2)], NO_STREAM).events)
        except BaseException as exc:
            b_errors.append(exc)
        finally:
            b_finished.set()

    b = threading.Thread(target=append_b, name="append-b", daemon=True)
    postgres = store.dialect == "postgresql"
    with store.transaction() as tx:
        (a,) = tx.append(stream_a, [accepted_event(1)], NO_STREAM).events
        b.start()
        if postgres:
            assert b_finished.wait(timeout=60), "B waited for A: a lock every writer takes"
            assert _sessions_waiting_on_a_lock(psycopg_dsn(database_url)) == 0
            seen = read_after(store, 0)
            assert [e.stream_id for e in seen] == [stream_b]  # B alone: A is not committed
            cursor = seen[-1].position
        else:  # B queues in BEGIN IMMEDIATE behind A's write lock
            assert not b_finished.wait(timeout=0.5), "B committed while A held an open position"
            assert read_after(store, 0) == []  # a tailing reader sees neither yet
            cursor = 0
    assert b_finished.wait(timeout=60), "B never finished after A committed"
    b.join(timeout=JOIN_TIMEOUT_S)
    assert not b_errors, b_errors
    (b_event,) = b_recorded
    in_order = [(e.stream_id, e.position) for e in read_after(store, 0)]
    if postgres:
        assert a.position < b_event.position  # A wrote first ...
        assert in_order == [(stream_b, 1), (stream_a, 2)]  # ... and committed second
        assert [e.stream_id for e in read_after(store, cursor)] == [stream_a]  # not skipped
    else:
        assert in_order == [(stream_a, a.position), (stream_b, b_event.position)]

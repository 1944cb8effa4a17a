"""Concurrent writers and tailing readers, on SQLite and on Postgres (contract §2).

Writers are separate OS processes (multiprocessing "spawn"), each with its own engine, as the
API processes and Celery workers of a deployment are. Two properties are proved:

* optimistic concurrency: racing appends to one stream never fork it or leave a gap; the
  losers get `ConcurrencyError` and retry;
* tailing: a reader that pages "after position N" sees every committed event exactly once,
  in position order, even while transactions hold uncommitted positions open.
"""

from __future__ import annotations

import queue
import random
import threading
import time
import traceback
import uuid
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from multiprocessing import get_context
from multiprocessing.process import BaseProcess
from multiprocessing.queues import Queue
from multiprocessing.synchronize import Barrier

import psycopg
import pytest
from sqlalchemy import select
from sqlalchemy.engine import make_url

from ledger.codes import Code
from ledger.error_info import ErrorInfo
from ledger.errors import ConcurrencyError
from ledger.events import (
    AnyPayload,
    JobAccepted,
    NewEvent,
    RecordedEvent,
    WorkDeclined,
    WorkFailed,
    WorkPartial,
    WorkRetryScheduled,
    WorkStarted,
    WorkSucceeded,
    job_id_of,
    job_stream,
)
from ledger.persistence.base import NO_STREAM
from ledger.persistence.schema import jobs
from ledger.persistence.store import SqlStore
from tests.factories import open_sql, verify_store

SPAWN = get_context("spawn")
START_TIMEOUT_S = 120.0  # spawned children import the ledger before the barrier releases them
RUN_TIMEOUT_S = 240.0  # whole workload; generous, this is a deadlock guard, not a benchmark
JOIN_TIMEOUT_S = 30.0

CONTENDERS = 8
WINS_EACH = 15

WRITERS = 6
EVENTS_EACH = 150  # 50 jobs of three events per writer
HOLDING_WRITERS = frozenset({0, 2, 4})  # these sometimes keep a transaction open after inserting
READ_LIMIT = 7  # small pages, so page boundaries fall everywhere


@dataclass(frozen=True)
class Report:
    """What a child process sends back when it ends (pickled through a queue)."""

    child: int
    wins: int = 0
    losses: int = 0
    losses_at_insert: int = 0  # conflicts caught by the unique index, not the version check
    positions: tuple[int, ...] = ()  # of the events it committed
    error: str | None = None  # a traceback


# --- process plumbing -----------------------------------------------------------------------


def _stop(processes: Sequence[BaseProcess]) -> None:
    """Terminate (SIGTERM to its pid, then SIGKILL) every process still running, and reap it."""
    for process in processes:
        if process.is_alive():
            process.terminate()
    for process in processes:
        if process.pid is None:
            continue
        process.join(timeout=5)
        if process.is_alive():
            process.kill()
            process.join(timeout=5)


@contextmanager
def running(processes: Sequence[BaseProcess]) -> Iterator[None]:
    """Start the processes; on the way out join them all, terminating any that fail to end."""
    try:
        for process in processes:
            process.start()
        yield
    except BaseException:
        _stop(processes)
        raise
    for process in processes:
        process.join(timeout=JOIN_TIMEOUT_S)
    stuck = [p.name for p in processes if p.is_alive()]
    _stop(processes)
    assert not stuck, f"processes did not exit: {stuck}"
    assert [p.exitcode for p in processes] == [0] * len(processes)


def _take(results: Queue[Report], timeout_s: float) -> Report:
    try:
        report = results.get(timeout=timeout_s)
    except queue.Empty:
        pytest.fail(f"no report from a child process within {timeout_s:.0f}s")
    if report.error is not None:
        pytest.fail(f"child process {report.child} failed:\n{report.error}")
    return report


def _report_failure(results: Queue[Report], me: int) -> None:
    results.put(Report(child=me, error=traceback.format_exc()))


def wait_until(condition: Callable[[], bool], timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout_s:.0f}s waiting for {what}")
        time.sleep(0.01)


def psycopg_dsn(url: str) -> str:
    """The per-test database's SQLAlchemy URL as a plain libpq URL."""
    return make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)


# --- realistic job events -------------------------------------------------------------------


def _event(payload: AnyPayload, actor: str) -> NewEvent:
    return NewEvent(payload=payload, actor=actor)


def _accepted(n: int, actor: str = "token:acme-agent") -> NewEvent:
    payload = JobAccepted(
        account="acme", tool="tracker.read_issue", args={"issue_ref": f"T-{n}"}, max_attempts=3
    )
    return _event(payload, actor)


def _started(attempt: int, worker: str) -> NewEvent:
    lease = datetime.now(UTC) + timedelta(seconds=30)
    return _event(WorkStarted(attempt=attempt, worker=worker, lease_expires_at=lease), worker)


def _retry_scheduled(attempt: int, worker: str) -> NewEvent:
    error = ErrorInfo(
        code=Code.SOURCE_UNRELIABLE,
        dependency="tracker",
        operation="read issue metadata",
        retryable=True,
        message="The tracker answered inconsistently.",
    )
    due = datetime.now(UTC) + timedelta(seconds=min(2**attempt, 300))
    return _event(WorkRetryScheduled(attempt=attempt, error=error, due_at=due), worker)


def _outcome(rng: random.Random, worker: str) -> NewEvent:
    choice = rng.randrange(4)
    if choice == 0:
        return _event(WorkSucceeded(attempt=1, result={"title": "Fix login"}), worker)
    if choice == 1:
        return _event(WorkDeclined(attempt=1, reason="already closed"), worker)
    if choice == 2:
        payload = WorkPartial(attempt=1, processed=40, skipped=["T-9"], total=50)
        return _event(payload, worker)
    error = ErrorInfo(code=Code.ACCESS_DENIED, dependency="tracker", message="No access.")
    return _event(WorkFailed(attempt=1, error=error), worker)


def next_event_on_contended_job(head: int, worker: str) -> NewEvent:
    """The event a worker would append after `head`: the decision, then attempts and retries
    (never a terminal outcome, so the stream can grow as long as the race lasts)."""
    if head == NO_STREAM:
        return _accepted(0, worker)
    if head % 2 == 1:
        return _started((head + 1) // 2, worker)
    return _retry_scheduled(head // 2, worker)


# --- children (module level, so that "spawn" can import them) -------------------------------


def contend(
    url: str, stream_id: str, me: int, wins: int, start: Barrier, results: Queue[Report]
) -> None:
    """Append to `stream_id` at the head just read until `wins` appends succeeded."""
    try:
        store = open_sql(url, pool_size=1)
        worker = f"worker:w-{me}"
        won = lost = at_insert = 0
        start.wait(timeout=START_TIMEOUT_S)
        while won < wins:
            stream = store.read_stream(stream_id)
            head = stream[-1].stream_version if stream else NO_STREAM
            try:
                store.append(stream_id, [next_event_on_contended_job(head, worker)], head)
            except ConcurrencyError as conflict:
                lost += 1
                at_insert += conflict.actual is None
            else:
                won += 1
        store.close()
        results.put(Report(child=me, wins=won, losses=lost, losses_at_insert=at_insert))
    except BaseException:
        _report_failure(results, me)


def write_jobs(
    url: str, me: int, total: int, hold_open: bool, start: Barrier, results: Queue[Report]
) -> None:
    """Record `total` events as whole jobs (decision, start, outcome) on fresh streams, in
    small transactions of one to three events; report the positions that committed."""
    try:
        rng = random.Random(me)
        store = open_sql(url, pool_size=1)
        worker = f"worker:w-{me}"
        committed: list[int] = []
        start.wait(timeout=START_TIMEOUT_S)
        for n in range(total // 3):
            stream_id = job_stream(uuid.uuid4())
            job = [_accepted(n), _started(1, worker), _outcome(rng, worker)]
            split = rng.choice([(1, 1, 1), (1, 2), (2, 1), (3,)])
            version = NO_STREAM
            for size in split:
                chunk, job = job[:size], job[size:]
                with store.transaction() as tx:
                    recorded = tx.append(stream_id, chunk, version).events
                    if hold_open and rng.random() < 0.5:
                        # Keep the positions just taken uncommitted for a moment: without the
                        # append lock, other writers would commit higher positions meanwhile.
                        time.sleep(rng.uniform(0.001, 0.015))
                committed.extend(e.position for e in recorded)
                version += size
        store.close()
        results.put(Report(child=me, positions=tuple(committed)))
    except BaseException:
        _report_failure(results, me)


# --- a. optimistic concurrency on one stream ------------------------------------------------


def test_racing_appends_to_one_stream_never_fork_or_gap(database_url: str, store: SqlStore) -> None:
    stream_id = job_stream(uuid.uuid4())
    start = SPAWN.Barrier(CONTENDERS)
    results: Queue[Report] = SPAWN.Queue()
    contenders = [
        SPAWN.Process(
            target=contend,
            args=(database_url, stream_id, me, WINS_EACH, start, results),
            name=f"contender-{me}",
        )
        for me in range(CONTENDERS)
    ]
    with running(contenders):
        reports = [_take(results, RUN_TIMEOUT_S) for _ in contenders]

    wins = {r.child: r.wins for r in reports}
    losses = sum(r.losses for r in reports)
    at_insert = sum(r.losses_at_insert for r in reports)
    total = CONTENDERS * WINS_EACH
    print(
        f"\n{store.dialect}: {total} appends won, {losses} lost with ConcurrencyError"
        f" ({at_insert} of them at the unique index)"
    )
    assert wins == dict.fromkeys(range(CONTENDERS), WINS_EACH)
    assert losses > 0, "no append ever lost the race: the test did not exercise a conflict"

    recorded = store.read_stream(stream_id)
    assert [e.stream_version for e in recorded] == list(range(1, total + 1))
    assert [e.prev_hash for e in recorded] == [None, *(e.hash for e in recorded[:-1])]
    positions = [e.position for e in recorded]
    assert positions == sorted(set(positions))
    # Every win a process counted is on the record under its name, and nothing else is.
    assert Counter(e.actor for e in recorded) == {
        f"worker:w-{me}": WINS_EACH for me in range(CONTENDERS)
    }

    report = verify_store(store)
    assert report.ok, report.problems
    assert report.events_checked == total
    # The read model moved in step with the winning appends only.
    with store.connection() as conn:
        job_position = conn.execute(
            select(jobs.c.ledger_position).where(jobs.c.job_id == job_id_of(stream_id))
        ).scalar_one()
    assert job_position == recorded[-1].position


# --- b. a tailing reader never misses a late commit -----------------------------------------


@dataclass
class Tail:
    seen: list[int]
    seen_while_writing: int
    committed: list[int]


def tail_until_writers_finish(store: SqlStore, results: Queue[Report], writers: int) -> Tail:
    """Page through `read_after` like a subscriber, until every writer has reported and the
    reader has caught up with everything they committed."""
    tail = Tail(seen=[], seen_while_writing=0, committed=[])
    done: set[int] = set()
    cursor = 0
    deadline = time.monotonic() + RUN_TIMEOUT_S

    def take(report: Report) -> None:
        if report.error is not None:
            pytest.fail(f"writer {report.child} failed:\n{report.error}")
        done.add(report.child)
        tail.committed.extend(report.positions)

    while True:
        while True:  # collect the reports already in, without blocking
            try:
                take(results.get_nowait())
            except queue.Empty:
                break
        writers_done = len(done) == writers  # decided before the read below
        batch = store.read_after(cursor, READ_LIMIT)
        if batch:
            tail.seen.extend(e.position for e in batch)
            cursor = batch[-1].position
            if not writers_done:
                tail.seen_while_writing += len(batch)
            continue
        if writers_done:
            return tail
        if time.monotonic() > deadline:
            pytest.fail(f"writers still running after {RUN_TIMEOUT_S:.0f}s")
        # Nothing new yet: wait for a writer's report (or a moment), then poll again.
        with suppress(queue.Empty):
            take(results.get(timeout=0.01))


def test_tailing_reader_sees_every_commit_once_in_order(database_url: str, store: SqlStore) -> None:
    start = SPAWN.Barrier(WRITERS)
    results: Queue[Report] = SPAWN.Queue()
    writers = [
        SPAWN.Process(
            target=write_jobs,
            args=(database_url, me, EVENTS_EACH, me in HOLDING_WRITERS, start, results),
            name=f"writer-{me}",
        )
        for me in range(WRITERS)
    ]
    with running(writers):
        tail = tail_until_writers_finish(store, results, WRITERS)

    everything = [e.position for e in store.iter_events()]
    print(
        f"\n{store.dialect}: tailed {len(tail.seen)} events, "
        f"{tail.seen_while_writing} of them while writers were still running"
    )
    assert len(everything) == WRITERS * EVENTS_EACH
    assert sorted(tail.committed) == everything  # what the writers say they committed
    assert all(a < b for a, b in zip(tail.seen, tail.seen[1:], strict=False))
    missed = sorted(set(everything) - set(tail.seen))
    assert not missed, f"the tailing reader skipped positions {missed[:20]}"
    assert tail.seen == everything
    assert tail.seen_while_writing > 0, "the reader never overlapped the writers"
    assert verify_store(store).ok


# --- the hazard, and how the store's appends avoid it ---------------------------------------


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


def test_an_uncommitted_append_holds_back_every_other_append(
    database_url: str, store: SqlStore
) -> None:
    """While transaction A holds a position uncommitted, B (another stream, another thread)
    cannot take a position or commit; so positions are in commit order."""
    stream_a, stream_b = job_stream(uuid.uuid4()), job_stream(uuid.uuid4())
    b_finished = threading.Event()
    b_recorded: list[RecordedEvent] = []
    b_errors: list[BaseException] = []

    def append_b() -> None:
        try:
            b_recorded.extend(store.append(stream_b, [_accepted(2)], NO_STREAM).events)
        except BaseException as exc:
            b_errors.append(exc)
        finally:
            b_finished.set()

    b = threading.Thread(target=append_b, name="append-b", daemon=True)
    with store.transaction() as tx:
        (a,) = tx.append(stream_a, [_accepted(1)], NO_STREAM).events
        b.start()
        if store.dialect == "postgresql":
            dsn = psycopg_dsn(database_url)
            wait_until(lambda: _sessions_waiting_on_a_lock(dsn) == 1, 30, "B to queue on a lock")
        # (On SQLite, B queues in BEGIN IMMEDIATE behind A's write lock.)
        assert not b_finished.wait(timeout=0.5), "B committed while A held an open position"
        assert store.read_after(0) == []  # a tailing reader sees neither yet
    assert b_finished.wait(timeout=60), "B never finished after A committed"
    b.join(timeout=JOIN_TIMEOUT_S)
    assert not b_errors, b_errors
    (b_event,) = b_recorded
    assert a.position < b_event.position
    assert [(e.stream_id, e.position) for e in store.read_after(0)] == [
        (stream_a, a.position),
        (stream_b, b_event.position),
    ]

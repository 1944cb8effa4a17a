"""`outcomes rebuild` online: a page of streams at a time under those streams' own locks, while
writers keep writing and readers keep reading; stopped anywhere, it resumes where it stopped.

- Writers (threads appending jobs, as the services do) write before, during and after pages
  they touch; afterwards every read model equals a fold of the events (`audit verify` passes)
  and the damage done before the rebuild is repaired. A reader polling jobs throughout never
  finds a row missing.
- A rebuild killed (SIGKILL, a real process) while it waits for a stream's lock resumes after
  the last page it committed, and finishes; one that finished begins again.
- A second rebuild takes over from a first, which stops at its next page.
"""

from __future__ import annotations

import random
import signal
import subprocess
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

import psycopg
import pytest
from sqlalchemy import delete, insert, select, update

from ledger.errors import RebuildTakenOverError
from ledger.job_view import JobView
from ledger.persistence.appends import JobAppend, LeaseChange
from ledger.persistence.base import Store
from ledger.persistence.locks import key_for
from ledger.persistence.schema import jobs
from ledger.persistence.sql_store import SqlStore
from ledger.rebuild_state import RebuildProgress
from ledger.runtime.ledger import Ledger
from ledger.services import audit
from ledger.services.rebuild import rebuild
from tests.factories import accepted, open_sql, started, succeeded
from tests.ledger_fill import fill, open_jobs
from tests.serving import embedded_env, outcomes_argv

WAIT_S = 30.0  # the longest a wait-until waits (never reached unless something is broken)


def wait_until(check: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + WAIT_S
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"gave up waiting: {what}")
        time.sleep(0.01)


def progress_of(store: Store) -> RebuildProgress | None:
    with store.reading() as reads:
        return reads.rebuild_progress()


def streams_in_order(store: Store) -> list[str]:
    with store.reading() as reads:
        return reads.stream_ids(None, 100_000)


def job_row(store: SqlStore, job_id: str) -> dict[str, object] | None:
    with store.connection() as conn:
        row = conn.execute(select(jobs).where(jobs.c.job_id == job_id)).mappings().first()
    return dict(row) if row is not None else None


def damage(store: SqlStore, job_ids: list[str]) -> str:
    """An edited row, a deleted one, and a ghost no event makes (its key returned)."""
    edited, gone = job_ids[0], job_ids[1]
    ghost = str(uuid.uuid4())
    with store.engine.begin() as conn:
        conn.execute(update(jobs).where(jobs.c.job_id == edited).values(status="failed"))
        row = dict(conn.execute(select(jobs).where(jobs.c.job_id == gone)).mappings().one())
        conn.execute(delete(jobs).where(jobs.c.job_id == gone))
        row |= {"job_id": ghost, "idempotency_key": None, "view": row["view"] | {"job_id": ghost}}
        conn.execute(insert(jobs).values(row))
    return ghost


# --- writers and readers meanwhile (Postgres: writers commit side by side) --------------------


@dataclass
class Traffic:
    """Writer threads moving open jobs on and submitting new ones, and a reader polling jobs,
    until stopped; what they did and saw."""

    store: SqlStore
    waiting: list[JobView]
    watched: list[str]
    writes: int = 0
    missing: list[str] = field(default_factory=list)
    errors: list[BaseException] = field(default_factory=list)
    stop: threading.Event = field(default_factory=threading.Event)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def run(self, writers: int = 2) -> list[threading.Thread]:
        shares = [self.waiting[i::writers] for i in range(writers)]
        threads = [threading.Thread(target=self._guarded, args=(self._write, s)) for s in shares]
        threads.append(threading.Thread(target=self._guarded, args=(self._read, [])))
        for thread in threads:
            thread.start()
        return threads

    def _guarded(self, work: Callable[[list[JobView]], None], share: list[JobView]) -> None:
        try:
            work(share)
        except BaseException as exc:  # reported by the test, not lost in a thread
            self.errors.append(exc)

    def _write(self, share: list[JobView]) -> None:
        rng = random.Random(len(share))
        while not self.stop.is_set():
            fresh = str(uuid.uuid4())
            items = [JobAppend(fresh, [accepted()], None)]
            if share:  # move one waiting job on: started, or started and succeeded
                view = share.pop(rng.randrange(len(share)))
                lease = LeaseChange("start", 1, "w-1", datetime.now(UTC) + timedelta(minutes=1))
                items.append(JobAppend(view.job_id, [started()], view, lease=lease))
            done = self.store.append_jobs(items)
            if len(done) > 1 and rng.random() < 0.5:
                claimed = done[1].job
                end = JobAppend(claimed.job_id, [succeeded()], claimed, LeaseChange("drop", 1))
                self.store.append_jobs([end])
            with self.lock:
                self.writes += 1

    def _read(self, _: list[JobView]) -> None:
        while not self.stop.is_set():
            for job_id in self.watched:
                view, _stands = self.store.read_job(job_id)
                if view is None:
                    self.missing.append(job_id)

    def written(self) -> int:
        with self.lock:
            return self.writes


@pytest.mark.postgres
def test_a_rebuild_runs_while_writers_write_and_readers_read(pg_database: str) -> None:
    with open_sql(pg_database, pool_size=8) as store:
        ledger = Ledger(store)
        done = fill(store, 120)
        waiting = open_jobs(store, 120)
        ghost = damage(store, [done[0].job_id, done[1].job_id])
        assert not audit.verify_all(ledger).ok
        watched = [v.job_id for v in done[2:40]] + [v.job_id for v in waiting[:40]]
        traffic = Traffic(store, list(waiting), watched)
        threads = traffic.run()
        pages: list[int] = []

        def each_page(events: int) -> None:
            # Every page waits for the writers to land something more: pages and writes
            # interleave for the whole rebuild, whatever the machine's speed.
            seen = traffic.written()
            pages.append(seen)
            wait_until(lambda: traffic.written() > seen or bool(traffic.errors), "a write")

        try:
            report = rebuild(ledger, progress=each_page, page=10)
        finally:
            traffic.stop.set()
            for thread in threads:
                thread.join(WAIT_S)
        assert traffic.errors == []
        assert len(pages) >= 20 and traffic.writes > len(pages)  # writes between every page
        assert traffic.missing == [], "a reader found a row missing during the rebuild"
        assert (report.updated, report.inserted, report.deleted) >= (1, 1, 1)
        assert job_row(store, ghost) is None
        found = audit.verify_all(ledger)
        assert found.ok, (found.chain.problems, found.read_models.problems[:5])
        progress = progress_of(store)
        assert progress is not None and progress.finished_at is not None


@pytest.mark.postgres
def test_rows_a_rebuild_writes_keep_where_their_streams_begin(pg_database: str) -> None:
    """The append function keeps where a job's stream begins (`first_position`), and its lookups
    read only the partitions from there on; a row without it is looked for in every partition.
    A row the rebuild inserts or rewrites gets it again, from the events the page read."""
    with open_sql(pg_database) as store:
        done = fill(store, 12)
        begun = {v.job_id: (job_row(store, v.job_id) or {})["first_position"] for v in done}
        assert all(isinstance(p, int) for p in begun.values())
        edited, gone = done[0].job_id, done[1].job_id
        with store.engine.begin() as conn:
            conn.execute(
                update(jobs)
                .where(jobs.c.job_id == edited)
                .values(status="failed", first_position=None)
            )
            conn.execute(delete(jobs).where(jobs.c.job_id == gone))
        report = rebuild(Ledger(store))
        assert (report.inserted, report.updated) == (1, 1)
        for job_id in (edited, gone):
            row = job_row(store, job_id)
            assert row is not None and row["first_position"] == begun[job_id], job_id


# --- stopped and resumed ---------------------------------------------------------------------


@contextmanager
def holding_stream(url: str, stream_id: str) -> Iterator[psycopg.Connection[object]]:
    """A transaction holding a stream's lock, as an append in progress would."""
    with psycopg.connect(url.replace("postgresql+psycopg://", "postgresql://", 1)) as conn:
        conn.execute("SELECT pg_advisory_xact_lock(%s)", (key_for("stream", stream_id),))
        yield conn
        conn.rollback()


def waiting_for_a_lock(url: str) -> bool:
    dsn = url.replace("postgresql+psycopg://", "postgresql://", 1)
    with psycopg.connect(dsn) as conn:
        row = conn.execute(
            "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted"
        ).fetchone()
    return bool(row and row[0])


@pytest.mark.postgres
def test_a_rebuild_killed_part_way_resumes_where_it_stopped(pg_database: str) -> None:
    with open_sql(pg_database) as store:
        ledger = Ledger(store)
        done = fill(store, 60)
        order = streams_in_order(store)
        early, late = order[5].removeprefix("job-"), order[50].removeprefix("job-")
        for job_id in (early, late):
            with store.engine.begin() as conn:
                conn.execute(update(jobs).where(jobs.c.job_id == job_id).values(status="x"))
        blocked = order[30]  # the fourth page (10 streams a page) waits for it
        with holding_stream(pg_database, blocked):
            argv = outcomes_argv("rebuild", "--page", "10", "--json")
            env = embedded_env(OUTCOMES_DATABASE_URL=pg_database)
            child = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
            try:
                wait_until(
                    lambda: (p := progress_of(store)) is not None and p.after_stream == order[29],
                    "three pages committed",
                )
                wait_until(lambda: waiting_for_a_lock(pg_database), "the rebuild to wait")
            finally:
                child.send_signal(signal.SIGKILL)
                child.communicate(timeout=WAIT_S)
        assert child.returncode == -signal.SIGKILL
        stopped = progress_of(store)
        assert stopped is not None and stopped.finished_at is None
        assert (stopped.after_stream, stopped.streams) == (order[29], 30)
        early_row, late_row = job_row(store, early), job_row(store, late)
        assert early_row is not None and early_row["status"] == "succeeded"  # its page committed
        assert late_row is not None and late_row["status"] == "x"  # its page never ran

        resumed = rebuild(ledger, page=10)
        assert (resumed.resumed_after, resumed.streams) == (order[29], 30)
        assert resumed.events_replayed == 3 * 30 and resumed.updated == 1
        assert resumed.started_at == stopped.started_at  # the same rebuild, finished
        late_row = job_row(store, late)
        assert late_row is not None and late_row["status"] == "succeeded"
        assert audit.verify_all(ledger).ok
        finished = progress_of(store)
        assert finished is not None and finished.finished_at is not None
        assert finished.streams == len(done)

        again = rebuild(ledger, page=10)  # a finished rebuild is not resumed: a new one
        assert (again.resumed_after, again.streams, again.updated) == (None, 60, 0)


def test_restart_begins_again_and_a_second_rebuild_takes_over(any_store: Store) -> None:
    ledger = Ledger(any_store)
    fill(any_store, 12)
    order = streams_in_order(any_store)

    class Stop(Exception):
        pass

    def stop_after_first_page(events: int) -> None:
        raise Stop

    with pytest.raises(Stop):
        rebuild(ledger, progress=stop_after_first_page, page=4)
    assert rebuild(ledger, page=4, restart=True).resumed_after is None  # from the first stream

    taken: list[int] = []

    def second_rebuild_meanwhile(events: int) -> None:
        if not taken:
            taken.append(rebuild(ledger, page=4).streams)  # takes over, and finishes

    with pytest.raises(RebuildTakenOverError):
        rebuild(ledger, progress=second_rebuild_meanwhile, page=4, restart=True)
    assert taken == [len(order) - 4]  # it went on after the first's first page
    progress = progress_of(any_store)
    assert progress is not None and progress.finished_at is not None

"""A tailing reader never misses a late commit, with writers in separate OS processes (contract §2).

Six spawned writers record whole jobs in small transactions, half of them sometimes holding a
transaction open after taking positions, while a reader pages "after position N" like a
subscriber, on SQLite and on Postgres: it sees every committed event exactly once, in position
order, including while the writers are still running.
"""

from __future__ import annotations

import queue
import time
from contextlib import suppress
from dataclasses import dataclass
from multiprocessing.queues import Queue

import pytest

from ledger.persistence.sql_store import SqlStore
from tests.concurrent_writers import RUN_TIMEOUT_S, SPAWN, Report, running, write_jobs
from tests.factories import verify_store
from tests.store_helpers import read_after

WRITERS = 6
EVENTS_EACH = 150  # 50 jobs of three events per writer
HOLDING_WRITERS = frozenset({0, 2, 4})  # these sometimes keep a transaction open after inserting
READ_LIMIT = 7  # small pages, so page boundaries fall everywhere


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
        batch = read_after(store, cursor, READ_LIMIT)
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

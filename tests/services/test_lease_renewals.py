"""Lease renewals in batches: the leases of a worker's running tools are pushed forward in one
statement, and heartbeats that arrive while one renewal is being written go in the next."""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import event

from ledger.events import job_id_of
from ledger.persistence.appends import NO_STREAM
from ledger.persistence.sql_store import SqlStore
from ledger.runtime.ledger import Ledger
from ledger.services.execute import Executor
from ledger.services.work import renew_leases
from tests.concurrent_writers import wait_until
from tests.factories import accepted, fresh_job_stream, started

WAIT_S = 10.0


def running_jobs(store: SqlStore, count: int) -> list[str]:
    """Jobs started with attempt 1's lease, lapsed already."""
    lapsed = datetime.now(UTC) - timedelta(seconds=5)
    jobs = []
    for _ in range(count):
        stream = fresh_job_stream()
        store.append(stream, [accepted(), started(lease_s=-5.0)], NO_STREAM)
        jobs.append(job_id_of(stream))
    with store.transaction() as tx:
        for job in jobs:
            tx.start_lease(job, 1, "w-1", lapsed)
    return jobs


@contextmanager
def lease_updates(store: SqlStore) -> Iterator[list[str]]:
    seen: list[str] = []

    def on_execute(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        if statement.lstrip().upper().startswith("UPDATE LEASES"):
            seen.append(statement)

    event.listen(store.engine, "before_cursor_execute", on_execute)
    try:
        yield seen
    finally:
        event.remove(store.engine, "before_cursor_execute", on_execute)


def overdue(store: SqlStore) -> set[str]:
    moment = datetime.now(UTC)
    with store.reading() as reads:
        return {o.view.job_id for o in reads.overdue_jobs(moment, None)}


def test_a_batch_of_leases_is_renewed_in_one_statement(store: SqlStore, ledger: Ledger) -> None:
    jobs = running_jobs(store, 12)
    assert set(jobs) <= overdue(store)
    with lease_updates(store) as updates:
        assert renew_leases(ledger, [(j, 1) for j in jobs] + [(jobs[0], 2)], 60.0) == [
            True
        ] * 12 + [False]
    assert len(updates) == 1
    assert not set(jobs) & overdue(store)


def test_heartbeats_during_a_renewal_go_together_in_the_next(
    store: SqlStore, ledger: Ledger
) -> None:
    jobs = running_jobs(store, 6)
    executor = Executor(ledger, "w-1", lease_s=60.0)
    first_flush_started, release_first = threading.Event(), threading.Event()
    flush = executor.renewals._flush
    sizes: list[int] = []

    def held_first(held: Sequence[tuple[str, int]]) -> Sequence[bool]:
        sizes.append(len(held))
        if len(sizes) == 1:
            first_flush_started.set()
            assert release_first.wait(WAIT_S)
        return flush(list(held))

    executor.renewals._flush = held_first
    beats = [threading.Thread(target=executor._heartbeat, args=(jobs[0], 1))]
    beats[0].start()
    assert first_flush_started.wait(WAIT_S)
    beats += [threading.Thread(target=executor._heartbeat, args=(j, 1)) for j in jobs[1:]]
    for beat in beats[1:]:
        beat.start()
    # The five wait behind the first renewal; once it is written, they are one statement.
    wait_until(lambda: len(executor.renewals._queue) == 5, WAIT_S, "five heartbeats queued")
    with lease_updates(store) as updates:
        release_first.set()
        for beat in beats:
            beat.join(WAIT_S)
    assert sizes == [1, 5]
    assert len(updates) == 2
    assert not set(jobs) & overdue(store)

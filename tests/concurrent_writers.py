"""Writer processes and realistic job events for the concurrency tests (contract §2).

Writers are separate OS processes (multiprocessing "spawn"), each with its own engine, as the
API processes and Celery workers of a deployment are: `contend` races appends to one stream,
`write_jobs` records whole jobs in small transactions, sometimes holding one open. Both are
module-level so that "spawn" can import them, and report back through a queue (`Report`).
`running` starts and always reaps them.
"""

from __future__ import annotations

import queue
import random
import time
import traceback
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from multiprocessing import get_context
from multiprocessing.process import BaseProcess
from multiprocessing.queues import Queue
from multiprocessing.synchronize import Barrier

import pytest
from sqlalchemy.engine import make_url

from ledger.codes import Code
from ledger.error_info import ErrorInfo
from ledger.errors import ConcurrencyError
from ledger.events import (
    AnyPayload,
    JobAccepted,
    NewEvent,
    WorkDeclined,
    WorkFailed,
    WorkPartial,
    WorkRetryScheduled,
    WorkStarted,
    WorkSucceeded,
    job_stream,
)
from ledger.persistence.appends import NO_STREAM
from tests.factories import open_sql

SPAWN = get_context("spawn")
START_TIMEOUT_S = 120.0  # spawned children import the ledger before the barrier releases them
RUN_TIMEOUT_S = 240.0  # whole workload; generous, this is a deadlock guard, not a benchmark
JOIN_TIMEOUT_S = 30.0


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


def take_report(results: Queue[Report], timeout_s: float) -> Report:
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


def accepted_event(n: int, actor: str = "token:acme-agent") -> NewEvent:
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
        return accepted_event(0, worker)
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
            job = [accepted_event(n), _started(1, worker), _outcome(rng, worker)]
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

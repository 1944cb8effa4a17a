"""The batched write path under races, on SQLite and Postgres: a tailing reader still never
misses a late commit, a brake pulled while batches of claims are in flight still stops every
job after it, and a delivery repeated after its batch committed (a crash before the broker's
ack) never runs a tool twice."""

from __future__ import annotations

import threading
import time
import uuid
from collections import Counter
from datetime import UTC, datetime, timedelta
from multiprocessing import get_context
from multiprocessing.queues import Queue
from multiprocessing.synchronize import Barrier

import pytest

from ledger.decisions import Caller, JobRequest
from ledger.events import JobAccepted, NewEvent, WorkStarted, WorkSucceeded
from ledger.job_view import JobView
from ledger.persistence.appends import AppendStatus, JobAppend
from ledger.persistence.sql_store import SqlStore
from ledger.runtime.ledger import Ledger
from ledger.services import brakes
from ledger.services.execute import Executor
from ledger.services.submit import submit
from ledger.services.work import ClaimRequest, ClaimResult, claim_many
from tests.factories import get_job, open_sql
from tests.store_helpers import read_after
from tests.tools import ECHO

SPAWN = get_context("spawn")
WRITERS = 4
BATCHES_EACH = 30
BATCH = 5  # jobs per batch; each batch holds one event of each of its jobs
TIMEOUT_S = 240.0


def write_batches(url: str, me: int, start: Barrier, results: Queue[tuple[int, list[int]]]) -> None:
    """Jobs in batches: decision, then start, then outcome, each step one `append_jobs`."""
    committed: list[int] = []
    try:
        store = open_sql(url, pool_size=1)
        start.wait(timeout=120)
        for _ in range(BATCHES_EACH // 3):
            views: list[JobView | None] = [None] * BATCH
            ids = [str(uuid.uuid4()) for _ in range(BATCH)]
            for step in range(3):
                items = [
                    JobAppend(j, [_event(step, me)], v) for j, v in zip(ids, views, strict=True)
                ]
                done = store.append_jobs(items)
                assert all(d.status is AppendStatus.OK for d in done), [d.status for d in done]
                views = [d.job for d in done]
                committed.extend(e.position for d in done for e in d.appended.events)  # type: ignore[union-attr]
        store.close()
        results.put((me, committed))
    except BaseException as exc:
        results.put((me, [-1]))
        raise exc


def _event(step: int, me: int) -> NewEvent:
    if step == 0:
        payload: object = JobAccepted(account="acme", tool="t.x", args={"w": me})
    elif step == 1:
        payload = WorkStarted(attempt=1, worker=f"w-{me}", lease_expires_at=_later())
    else:
        payload = WorkSucceeded(attempt=1, result={"w": me})
    return NewEvent(payload=payload, actor=f"writer-{me}")  # type: ignore[arg-type]


def _later() -> datetime:
    return datetime.now(UTC) + timedelta(seconds=30)


def test_a_tailing_reader_misses_no_batched_commit(database_url: str, store: SqlStore) -> None:
    start = SPAWN.Barrier(WRITERS)
    results: Queue[tuple[int, list[int]]] = SPAWN.Queue()
    writers = [
        SPAWN.Process(target=write_batches, args=(database_url, me, start, results))
        for me in range(WRITERS)
    ]
    for process in writers:
        process.start()
    seen: list[int] = []
    committed: list[int] = []
    reports = 0
    deadline = time.monotonic() + TIMEOUT_S
    try:
        while reports < WRITERS or len(seen) < len(committed):
            assert time.monotonic() < deadline, "the writers or the reader stalled"
            while reports < WRITERS and not results.empty():
                _, positions = results.get()
                assert positions != [-1], "a writer failed"
                committed.extend(positions)
                reports += 1
            page = read_after(store, seen[-1] if seen else 0, limit=7)
            seen.extend(e.position for e in page)
    finally:
        for process in writers:
            process.join(timeout=30)
            if process.is_alive():
                process.kill()
    assert len(committed) == WRITERS * BATCHES_EACH // 3 * 3 * BATCH
    assert seen == sorted(committed)  # every commit, once, in order: none skipped


def test_a_brake_pulled_during_batched_claims_stops_every_later_start(ledger: Ledger) -> None:
    caller = Caller("acme", "tok")
    job_ids = [
        submit(ledger, caller, JobRequest(ECHO, {"text": str(n)})).view.job_id for n in range(120)
    ]
    claims: list[tuple[str, ClaimResult]] = []
    lock = threading.Lock()
    was_pulled = threading.Event()

    def claimer(share: list[str], wait_for_pull: bool) -> None:
        for start in range(0, len(share), 8):
            batch = [ClaimRequest(j, "w", 30.0) for j in share[start : start + 8]]
            done = claim_many(ledger, batch)
            with lock:
                claims.extend((r.job_id, c.result) for r, c in zip(batch, done, strict=True))
            if wait_for_pull:  # so some claims surely come after it, however busy the machine
                was_pulled.wait(timeout=60)

    # One claimer races the pull; two wait for it after their first batch.
    threads = [threading.Thread(target=claimer, args=(job_ids[i::3], i > 0)) for i in range(3)]
    for thread in threads:
        thread.start()
    while len(claims) < 24:  # let some batches commit before the pull
        time.sleep(0.001)
    pulled = brakes.pull(ledger, "global", "stop", "olga")
    was_pulled.set()
    for thread in threads:
        thread.join(timeout=60)

    assert sorted(j for j, _ in claims) == sorted(job_ids)
    results = Counter(result for _, result in claims)
    assert results[ClaimResult.CLAIMED] >= 24 and results[ClaimResult.HALTED] > 0
    for job_id, result in claims:
        events = ledger.store.read_stream(f"job-{job_id}")
        (_decision, claimed) = events
        if result is ClaimResult.CLAIMED:
            assert claimed.type == "work.started" and claimed.position < pulled.ledger_position
        else:
            assert claimed.type == "work.halted" and claimed.position > pulled.ledger_position


@pytest.mark.parametrize("crash_after", ["claim", "outcome"])
def test_a_delivery_repeated_after_its_batch_committed_never_runs_twice(
    ledger: Ledger, crash_after: str
) -> None:
    """The worker committed (the claim, or the outcome too), then died before acking: the
    broker delivers the job again, and the claim finds it running or closed."""
    job = submit(ledger, Caller("acme", "tok"), JobRequest(ECHO, {"text": "x"})).view
    first = Executor(ledger, "w-1")
    if crash_after == "claim":
        (claimed,) = claim_many(ledger, [ClaimRequest(job.job_id, "w-1", 30.0)])
        assert claimed.result is ClaimResult.CLAIMED
    else:
        assert first.execute(job.job_id).event_type == "work.succeeded"
    again = Executor(ledger, "w-2").execute(job.job_id)
    assert again.claim is ClaimResult.SKIPPED and again.event_type is None
    view = get_job(ledger, job.job_id)
    assert view is not None and view.attempts == 1
    started = [e for e in ledger.store.read_stream(f"job-{job.job_id}") if e.type == "work.started"]
    assert len(started) == 1

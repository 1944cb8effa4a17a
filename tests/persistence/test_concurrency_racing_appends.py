"""Optimistic concurrency on one stream, with writers in separate OS processes (contract §2).

Eight spawned processes, each with its own engine (as a deployment's API processes and Celery
workers are), race appends to one job stream on SQLite and on Postgres: the stream never forks
or leaves a gap, its hash chain verifies, every counted win is on the record under its writer's
name, the losers got `ConcurrencyError` (and retried), and the read model moved in step.
"""

from __future__ import annotations

import uuid
from collections import Counter
from multiprocessing.queues import Queue

from sqlalchemy import select

from ledger.events import job_id_of, job_stream
from ledger.persistence.schema import jobs
from ledger.persistence.sql_store import SqlStore
from tests.concurrent_writers import RUN_TIMEOUT_S, SPAWN, Report, contend, running, take_report
from tests.factories import verify_store

CONTENDERS = 8
WINS_EACH = 15


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
        reports = [take_report(results, RUN_TIMEOUT_S) for _ in contenders]

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

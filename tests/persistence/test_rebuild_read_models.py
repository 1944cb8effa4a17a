"""Read models rebuilt from the events alone equal the ones the live projections maintained.

A seeded random workload (tests/rebuild_workload.py) drives many job, brake and token streams
through valid lifecycles. The live tables are snapshotted and compared with the tables
`outcomes rebuild` (`ledger.services.rebuild`) writes from the events: equal, without touching
the events, twice over; and a rebuild repairs read models damaged the way a bad manual fix
would.
"""

from __future__ import annotations

import random

import pytest
from sqlalchemy import Connection, delete, insert, select, update

from ledger.persistence.schema import brakes, jobs, tokens
from ledger.persistence.sql_store import SqlStore
from tests.factories import rebuild
from tests.rebuild_workload import (
    SEEDS,
    Workload,
    count_events,
    differences,
    event_rows,
    new_id,
    run_workload,
    snapshot,
)


@pytest.mark.parametrize("seed", SEEDS)
def test_rebuild_reproduces_the_live_read_models(store: SqlStore, seed: int) -> None:
    work = run_workload(store, random.Random(seed))
    live = snapshot(store)
    assert [len(live[t.name]) for t in (jobs, brakes, tokens)] == [
        len(work.jobs),
        len(work.brakes),
        len(work.tokens),
    ]
    before = event_rows(store)

    replayed = rebuild(store).events_replayed

    assert replayed == work.event_count == count_events(store)
    rebuilt = snapshot(store)
    assert differences(live, rebuilt) == []
    assert rebuilt == live
    assert event_rows(store) == before, "a rebuild must not touch the events"
    assert rebuild(store).events_replayed == work.event_count
    assert snapshot(store) == live, "a second rebuild must change nothing"


def corrupt(conn: Connection, rng: random.Random, work: Workload) -> None:
    """Damage every read model the way a bad manual fix would."""
    victims = rng.sample([p.key for p in work.jobs], 7)
    conn.execute(delete(jobs).where(jobs.c.job_id.in_(victims)))
    open_job = next(p.key for p in work.jobs if p.kind == "running" and p.key not in victims)
    conn.execute(
        update(jobs).where(jobs.c.job_id == open_job).values(status="succeeded", terminal=True)
    )
    ghost = conn.execute(select(jobs).where(jobs.c.job_id == open_job)).mappings().one()
    conn.execute(insert(jobs).values({**ghost, "job_id": new_id(rng), "idempotency_key": None}))
    conn.execute(delete(brakes).where(brakes.c.brake_id == work.brakes[0].key))
    token = work.tokens[0].key
    conn.execute(update(tokens).where(tokens.c.token_id == token).values(revoked=True, role="x"))


def test_rebuild_repairs_a_corrupted_read_model(store: SqlStore) -> None:
    rng = random.Random(SEEDS[0])
    work = run_workload(store, rng)
    live = snapshot(store)
    with store.engine.begin() as conn:
        corrupt(conn, rng, work)
    damaged = snapshot(store)
    assert len(differences(live, damaged)) >= 10, "the corruption must have taken effect"

    assert rebuild(store).events_replayed == work.event_count

    repaired = snapshot(store)
    assert differences(live, repaired) == []
    assert repaired == live

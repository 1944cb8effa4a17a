"""Ledgers of many jobs, written as the services write them (`append_jobs`, in batches: one
statement a batch on Postgres), for the tests that compare a small ledger with a large one
and the ones that rebuild while writers write."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

from ledger.job_view import JobView
from ledger.persistence.appends import JobAppend, LeaseChange
from ledger.persistence.base import Store
from tests.factories import accepted, started, succeeded

BATCH = 200


def fill(store: Store, jobs: int, batch: int = BATCH) -> list[JobView]:
    """`jobs` jobs, each accepted, started and succeeded (three events, three appends)."""
    done: list[JobView] = []
    for start in range(0, jobs, batch):
        ids = [str(uuid.uuid4()) for _ in range(min(batch, jobs - start))]
        decided = store.append_jobs([JobAppend(i, [accepted()], None) for i in ids])
        lease = datetime.now(UTC) + timedelta(seconds=30)
        claim = LeaseChange("start", 1, "w-1", lease)
        claimed = store.append_jobs(
            [
                JobAppend(i, [started()], d.job, lease=claim)
                for i, d in zip(ids, decided, strict=True)
            ]
        )
        ended = store.append_jobs(
            [
                JobAppend(i, [succeeded(n=1)], c.job, LeaseChange("drop", 1))
                for i, c in zip(ids, claimed, strict=True)
            ]
        )
        done.extend(e.job for e in ended)
    return done


def open_jobs(store: Store, jobs: int) -> list[JobView]:
    """`jobs` jobs accepted and nothing more (writers move them on later)."""
    ids = [str(uuid.uuid4()) for _ in range(jobs)]
    decided = store.append_jobs([JobAppend(i, [accepted()], None) for i in ids])
    return [d.job for d in decided]

"""The job contract, fairness's part (docs/fairness.md): an account's live leases, its
confirmed messages waiting in the broker, the jobs its dispatch window holds back (the longest
waiting first), and the accounts that have some. Runs on every store (memory, SQLite,
Postgres)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from ledger.events import job_id_of, job_stream
from ledger.persistence.appends import NO_STREAM
from ledger.persistence.base import Store
from ledger.queueing import Confirmation
from tests.factories import accepted, fresh_job_stream, started


def waiting(store: Store, account: str) -> str:
    stream = fresh_job_stream()
    store.append(stream, [accepted(account=account)], NO_STREAM)
    return job_id_of(stream)


def test_the_fairness_figures_by_account(any_store: Store) -> None:
    acme = [waiting(any_store, "acme") for _ in range(4)]
    globex = waiting(any_store, "globex")
    now = datetime.now(UTC)
    with any_store.transaction() as tx:
        tx.record_dispatches([Confirmation(j, 1, None, now) for j in (acme[0], acme[1], globex)])
        tx.append(job_stream(acme[0]), [started()], 1)  # started: running, no longer queued
        tx.start_lease(acme[0], 1, "w-1", now + timedelta(seconds=30))
        tx.start_lease(acme[3], 1, "w-1", now - timedelta(seconds=1))  # lapsed: not live

    with any_store.reading() as reads:
        assert reads.running_by_account(["acme", "globex"], now) == {"acme": 1}
        assert reads.queued_by_account(["acme", "globex", "nobody"]) == {"acme": 1, "globex": 1}
        assert [v.job_id for v in reads.held_jobs("acme", 10)] == acme[2:]
        assert [v.job_id for v in reads.held_jobs("acme", 1)] == acme[2:3]
        assert reads.held_jobs("globex", 10) == []
        assert reads.held_accounts(10) == ["acme"]
        assert reads.running_by_account([], now) == {}

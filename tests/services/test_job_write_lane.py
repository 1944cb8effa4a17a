"""Every job write goes through the one batch append (`Writes.append_jobs`), whose statuses
answer its preconditions: the reconciler's findings, an outcome that finds its job moved (on
time after an earlier attempt's late outcome, or kept late), and a submit with a quota. Each runs
on every store (memory, SQLite, Postgres), whose lanes differ: Postgres's is one SQL call."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime, timedelta

import pytest

from ledger.codes import Code, Status
from ledger.decisions import Caller, JobRequest
from ledger.errors import ContentionError
from ledger.events import NewEvent, WorkSucceeded, job_stream
from ledger.job_view import JobView
from ledger.persistence.appends import AppendStatus, JobAppend, JobAppended
from ledger.persistence.base import Store
from ledger.queries import JobFilter
from ledger.reconcile_rules import ReconcilePolicy
from ledger.runtime.ledger import Ledger
from ledger.services import jobs
from ledger.services.reconcile import reconcile_once
from ledger.services.submit import submit
from ledger.services.work import MOVED_TRIES, ClaimResult, claim, record_outcome
from tests.factories import Recorder
from tests.store_helpers import renew_lease
from tests.tools import METERED, QUOTA, RECONCILE_READS, RECONCILE_SPENDS

POLICY = ReconcilePolicy(relay_after_s=3600)
AGENT = Caller(account="acme", token_id="tok")


@pytest.fixture
def ledger(any_store: Store) -> Ledger:
    return Ledger(any_store)


def _accept(ledger: Ledger, tool: str) -> str:
    return submit(ledger, AGENT, JobRequest(tool, {}), Recorder()).view.job_id


def _claimed(ledger: Ledger, job_id: str, worker: str) -> JobView:
    claimed = claim(ledger, job_id, worker, lease_s=30)
    assert claimed.result is ClaimResult.CLAIMED and claimed.view is not None
    return claimed.view


def _lose(ledger: Ledger, job_id: str) -> None:
    """The claiming worker froze: its lease lapses and the reconciler judges the silence."""
    attempt = jobs.get(ledger, job_id).attempts
    with ledger.store.transaction() as tx:
        tx.start_lease(job_id, attempt, "frozen", datetime.now(UTC) - timedelta(seconds=1))
    reconcile_once(ledger, Recorder(), POLICY)


def _success(claimed: JobView) -> NewEvent:
    return NewEvent(payload=WorkSucceeded(attempt=claimed.attempts, result={}), actor="w")


def _types(ledger: Ledger, job_id: str) -> list[str]:
    return [e.type for e in ledger.store.read_stream(job_stream(job_id))]


def _holds_lease(ledger: Ledger, job_id: str, attempt: int) -> bool:
    with ledger.store.transaction() as tx:
        return renew_lease(tx, job_id, attempt, datetime.now(UTC) + timedelta(seconds=30))


def test_an_outcome_after_the_reconciler_closed_the_job_is_kept_late_once(
    ledger: Ledger,
) -> None:
    job_id = _accept(ledger, RECONCILE_SPENDS)
    claimed = _claimed(ledger, job_id, "w-1")
    _lose(ledger, job_id)
    closed = jobs.get(ledger, job_id)
    assert (closed.status, closed.code) == (Status.FAILED, Code.OUTCOME_MISSING)
    outcome = _success(claimed)
    assert record_outcome(ledger, claimed, outcome).late
    assert record_outcome(ledger, claimed, outcome).late  # a retried write: recognised
    view = jobs.get(ledger, job_id)
    assert (view.status, view.code) == (Status.FAILED, Code.OUTCOME_MISSING)
    assert [(late["attempt"], late["type"]) for late in view.late_outcomes] == [
        (1, "work.succeeded")
    ]
    assert _types(ledger, job_id)[-2:] == ["job.outcome_missing", "work.late_outcome"]
    assert not _holds_lease(ledger, job_id, claimed.attempts)


def test_an_outcome_after_only_an_earlier_attempts_late_outcome_is_on_time(
    ledger: Ledger,
) -> None:
    job_id = _accept(ledger, RECONCILE_READS)  # two attempts: a lost one is tried again
    first = _claimed(ledger, job_id, "w-1")
    _lose(ledger, job_id)
    second = _claimed(ledger, job_id, "w-2")
    assert record_outcome(ledger, first, _success(first)).late  # the lost attempt answers
    recorded = record_outcome(ledger, second, _success(second))
    assert not recorded.late and recorded.version == second.stream_version + 2
    view = jobs.get(ledger, job_id)
    assert (view.status, view.attempts, view.stream_version) == (
        Status.SUCCEEDED,
        2,
        recorded.version,
    )
    assert _types(ledger, job_id)[-2:] == ["work.late_outcome", "work.succeeded"]


def test_a_finding_on_a_job_that_moved_is_a_lost_race_and_writes_nothing(
    ledger: Ledger, monkeypatch: pytest.MonkeyPatch
) -> None:
    job_id = _accept(ledger, RECONCILE_SPENDS)
    claimed = _claimed(ledger, job_id, "w-1")
    with ledger.store.transaction() as tx:
        tx.start_lease(job_id, 1, "frozen", datetime.now(UTC) - timedelta(seconds=1))
    with ledger.store.reading() as reads:
        overdue = reads.overdue_jobs(datetime.now(UTC), None)

    class Stale:  # the reconciler's read, taken before the worker's outcome landed
        def __init__(self, inner: object) -> None:
            self._inner = inner

        def __enter__(self) -> object:
            reads = self._inner.__enter__()  # type: ignore[attr-defined]
            reads.overdue_jobs = lambda *_: overdue
            return reads

        def __exit__(self, *exc: object) -> None:
            self._inner.__exit__(*exc)  # type: ignore[attr-defined]

    assert not record_outcome(ledger, claimed, _success(claimed)).late
    before = _types(ledger, job_id)
    reading = ledger.store.reading
    monkeypatch.setattr(ledger.store, "reading", lambda: Stale(reading()))
    result = reconcile_once(ledger, Recorder(), POLICY)
    assert (result.recorded, result.lost_races) == ([], 1)
    assert _types(ledger, job_id) == before
    assert jobs.get(ledger, job_id).status is Status.SUCCEEDED


def test_a_tool_with_a_quota_is_decided_in_the_one_append(ledger: Ledger) -> None:
    """The quota is the append's precondition: within it, accepted; over it, the refusal that
    names it (with when to retry), recorded; a replay of a held key is answered first."""
    keyed = JobRequest(METERED, {"text": "a"}, idempotency_key="k-1")
    first = submit(ledger, AGENT, keyed, Recorder())
    for _ in range(QUOTA - 1):
        assert submit(ledger, AGENT, JobRequest(METERED, {"text": "b"}), Recorder()).view.accepted
    over = submit(ledger, AGENT, JobRequest(METERED, {"text": "c"}), Recorder()).view
    assert (over.status, over.code) == (Status.REFUSED, Code.QUOTA_EXCEEDED)
    assert over.error is not None and over.error.retry_after_s is not None
    assert 3500 < over.error.retry_after_s <= 3600  # when the oldest leaves the hour's window
    again = submit(ledger, AGENT, keyed, Recorder())
    assert again.replayed and again.view == jobs.get(ledger, first.view.job_id)
    assert _types(ledger, first.view.job_id) == ["job.accepted"]
    assert len(_jobs_of(ledger)) == QUOTA + 1  # the refusal is recorded, the replay is not
    other = Caller(account="beta", token_id="tok-beta")  # per account
    assert submit(ledger, other, JobRequest(METERED, {"text": "d"}), Recorder()).view.accepted


def _jobs_of(ledger: Ledger) -> list[JobView]:
    with ledger.store.reading() as reads:
        return reads.jobs(JobFilter(limit=10))


def test_an_outcome_whose_stream_keeps_moving_is_given_up_typed_never_spun_on(
    ledger: Ledger, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A read model that disagrees with its stream (every append conflicts): a bounded number
    of tries, then a typed error and nothing recorded; the lease lapses for the reconciler."""
    job_id = _accept(ledger, RECONCILE_READS)
    claimed = _claimed(ledger, job_id, "w-1")
    appends: list[int] = []

    def conflicting(items: Sequence[JobAppend]) -> list[JobAppended]:
        appends.append(len(items))
        return [JobAppended(AppendStatus.CONFLICT) for _ in items]

    # Every try's append, and the group commit's before them.
    monkeypatch.setattr(ledger.store, "append_jobs", conflicting)
    with pytest.raises(ContentionError):
        record_outcome(ledger, claimed, _success(claimed))
    assert len(appends) == 1 + MOVED_TRIES  # the group commit's, then each try's
    monkeypatch.undo()
    assert _types(ledger, job_id)[-1] == "work.started"  # nothing of the outcome recorded

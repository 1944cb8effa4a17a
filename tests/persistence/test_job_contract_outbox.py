"""The job contract, the outbox's part: which job's message the broker confirmed (the
newest wait's record kept, a worker's rejection after it kept, one before it cleared), the
jobs left to publish, each queue's epoch, the evidence the reconciler reads, the backlog's
figures, and forgetting finished jobs. Runs on every store (memory, SQLite, Postgres)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from ledger.events import JobRedispatched, WorkRetryScheduled, job_id_of
from ledger.persistence.appends import NO_STREAM
from ledger.persistence.base import Store
from ledger.queueing import Confirmation
from tests.factories import accepted, failed, fresh_job_stream, new, started, succeeded


def waiting_job(store: Store, start_within_s: float = 600) -> str:
    stream = fresh_job_stream()
    store.append(stream, [accepted(start_within_s=start_within_s)], NO_STREAM)
    return job_id_of(stream)


def confirm(store: Store, job_id: str, version: int, epoch: str | None, at: datetime) -> None:
    with store.transaction() as tx:
        tx.record_dispatches([Confirmation(job_id, version, epoch, at)])


def test_a_confirmation_keeps_the_newest_wait_and_a_later_rejection(any_store: Store) -> None:
    job = waiting_job(any_store)
    t0 = datetime.now(UTC)
    with any_store.reading() as reads:
        assert reads.dispatch_state(job) is None
    confirm(any_store, job, 1, "e1", t0)
    confirm(any_store, job, 1, "e1", t0)  # recorded twice (a relay's duplicate): one record
    with any_store.reading() as reads:
        state = reads.dispatch_state(job)
    assert state is not None and (state.version, state.epoch, state.rejected) == (1, "e1", None)
    with any_store.transaction() as tx:
        tx.reject_dispatch(job, 1, "w-9: permission denied", t0 + timedelta(seconds=1))
    confirm(any_store, job, 1, "e1", t0)  # a late flush of this wait's confirmation
    with any_store.reading() as reads:
        state = reads.dispatch_state(job)
    assert state is not None and state.rejected == "w-9: permission denied"  # still evidence
    confirm(any_store, job, 2, "e2", t0 + timedelta(seconds=2))  # the re-dispatch's message
    confirm(any_store, job, 1, "e1", t0)  # an older wait's record never replaces a newer
    with any_store.reading() as reads:
        state = reads.dispatch_state(job)
    assert state is not None
    assert (state.version, state.epoch, state.rejected, state.rejected_at) == (2, "e2", None, None)
    assert state.rejected_version is None


def test_a_rejection_recorded_before_its_confirmation_stands(any_store: Store) -> None:
    """The broker hands a message to a worker before it confirms it to the publisher: a
    rejection can be recorded first, and the wait's confirmation must not clear it."""
    job = waiting_job(any_store)
    t0 = datetime.now(UTC)
    with any_store.transaction() as tx:
        tx.reject_dispatch(job, 1, "w-1: boom", t0)
    with any_store.reading() as reads:
        state = reads.dispatch_state(job)
        (found,) = [o for o in reads.overdue_jobs(t0, None) if o.view.job_id == job]
    assert state is not None and (state.rejected, state.rejected_version) == ("w-1: boom", 1)
    assert found.dispatch == state  # evidence, although the deadline is far off
    confirm(any_store, job, 1, None, t0 + timedelta(seconds=1))  # this wait's, recorded late
    with any_store.reading() as reads:
        kept = reads.dispatch_state(job)
    assert kept is not None and kept.rejected == "w-1: boom" and kept.version == 1


def test_a_rejection_of_an_earlier_wait_is_no_evidence(any_store: Store) -> None:
    job = waiting_job(any_store)
    t0 = datetime.now(UTC)
    confirm(any_store, job, 1, None, t0)
    with any_store.transaction() as tx:
        tx.reject_dispatch(job, 1, "w-1: boom", t0)
    again = JobRedispatched(dispatch=2, reason="r", evidence="worker_rejected")
    any_store.append(f"job-{job}", [new(again)], 1)  # the re-dispatch: a new wait, version 2
    with any_store.reading() as reads:
        assert [o.view.job_id for o in reads.overdue_jobs(t0, None)] == []


def test_undispatched_jobs_are_the_waiting_ones_without_a_confirmation_for_this_wait(
    any_store: Store,
) -> None:
    fresh, confirmed, stale = (waiting_job(any_store) for _ in range(3))
    done = fresh_job_stream()
    any_store.append(done, [accepted(start_within_s=600), started(), succeeded()], NO_STREAM)
    now_ = datetime.now(UTC)
    confirm(any_store, confirmed, 1, None, now_)
    confirm(any_store, stale, 1, None, now_)
    again = JobRedispatched(dispatch=2, reason="r", evidence="queue_lost")
    any_store.append(f"job-{stale}", [new(again)], 1)  # a new wait: version 2, unconfirmed
    later = datetime.now(UTC) + timedelta(seconds=1)
    with any_store.reading() as reads:
        assert reads.undispatched_jobs(now_ - timedelta(hours=1), 10) == []  # all too fresh
        found = [v.job_id for v in reads.undispatched_jobs(later, 10)]
        first = [v.job_id for v in reads.undispatched_jobs(later, 1)]
    assert found == [fresh, stale]  # oldest change first; the confirmed and the done left out
    assert first == [fresh]


def test_a_retry_is_waiting_and_its_message_is_its_own(any_store: Store) -> None:
    stream = fresh_job_stream()
    any_store.append(stream, [accepted(start_within_s=60), started()], NO_STREAM)
    job = job_id_of(stream)
    now_ = datetime.now(UTC)
    confirm(any_store, job, 1, "e1", now_)  # the first attempt's message
    error = failed().payload.error  # type: ignore[attr-defined]
    retry = WorkRetryScheduled(attempt=1, error=error, due_at=now_ + timedelta(seconds=30))
    any_store.append(stream, [new(retry)], 2)
    with any_store.reading() as reads:
        found = [v.job_id for v in reads.undispatched_jobs(now_ + timedelta(seconds=1), 10)]
        view = reads.job(job)
        summary = reads.dispatch_summary()
    assert found == [job]
    assert view is not None and view.start_by == retry.due_at + timedelta(seconds=60)
    assert (summary.waiting, summary.unconfirmed) == (1, 1)


def test_evidence_is_a_rejection_or_a_confirmation_under_another_epoch(any_store: Store) -> None:
    old, current, unconfirmed = (waiting_job(any_store) for _ in range(3))
    now_ = datetime.now(UTC)
    confirm(any_store, old, 1, "e1", now_)
    confirm(any_store, current, 1, "e2", now_)
    with any_store.reading() as reads:
        unknown = {o.view.job_id for o in reads.overdue_jobs(now_, None)}
        moved = {o.view.job_id: o for o in reads.overdue_jobs(now_, "e2")}
    assert unknown == set()  # no epoch known: nothing is evidence
    assert set(moved) == {old}
    assert moved[old].dispatch is not None and moved[old].dispatch.epoch == "e1"
    assert unconfirmed not in moved  # the relay's to publish, not the reconciler's to judge


def test_a_queue_epoch_changes_only_from_the_one_expected(any_store: Store) -> None:
    t0 = datetime.now(UTC)
    with any_store.transaction() as tx:
        assert tx.queue_epoch("q") is None
        assert tx.set_queue_epoch("q", None, "e1", t0)
        assert not tx.set_queue_epoch("q", None, "e9", t0)  # a second first epoch loses
    with any_store.transaction() as tx:
        assert not tx.set_queue_epoch("q", "e0", "e9", t0)  # not the current one
        assert tx.set_queue_epoch("q", "e1", "e2", t0)
        assert tx.set_queue_epoch("other", None, "x1", t0)
    with any_store.reading() as reads:
        assert (reads.queue_epoch("q"), reads.queue_epoch("other")) == ("e2", "x1")


def test_the_backlog_figures(any_store: Store) -> None:
    with any_store.reading() as reads:
        before = reads.last_position()
    a, b = waiting_job(any_store), waiting_job(any_store)
    running = fresh_job_stream()
    any_store.append(running, [accepted(start_within_s=600), started()], NO_STREAM)
    any_store.append(f"job-{a}", [started()], 1)
    with any_store.in_order() as reads:
        upto = reads.last_position()
        assert reads.waiting_count() == 1  # b; a and the other one are running
        assert reads.starts_between(before, upto) == 2
        assert reads.starts_between(upto, upto) == 0
        summary = reads.dispatch_summary()
    assert (summary.waiting, summary.unconfirmed) == (1, 1)
    assert summary.oldest_waiting_since is not None
    assert summary.redispatched == {}
    again = JobRedispatched(dispatch=2, reason="r", evidence="queue_lost")
    legacy = JobRedispatched(dispatch=2, reason="deadline")  # before evidence was required
    any_store.append(f"job-{b}", [new(again)], 1)
    other = waiting_job(any_store)
    any_store.append(f"job-{other}", [new(legacy)], 1)
    with any_store.reading() as reads:
        assert reads.dispatch_summary().redispatched == {"queue_lost": 1, "timer": 1}


def test_only_waiting_jobs_are_recorded_and_finished_ones_pruned(any_store: Store) -> None:
    waiting, finishing = waiting_job(any_store), waiting_job(any_store)
    done = fresh_job_stream()
    any_store.append(done, [accepted(start_within_s=600), started(), succeeded()], NO_STREAM)
    now_ = datetime.now(UTC)
    for job in (waiting, finishing, job_id_of(done), "00000000-0000-4000-8000-000000000000"):
        confirm(any_store, job, 1, None, now_)
    with any_store.reading() as reads:
        # A job that started before its confirmation was recorded needs none; nor one unknown.
        assert reads.dispatch_state(job_id_of(done)) is None
        assert reads.dispatch_state("00000000-0000-4000-8000-000000000000") is None
    any_store.append(f"job-{finishing}", [started(), succeeded()], 1)
    with any_store.transaction() as tx:
        assert tx.prune_dispatches(10) == 1  # the job that finished since
    with any_store.transaction() as tx:
        assert tx.prune_dispatches(10) == 0
        assert tx.dispatch_state(waiting) is not None

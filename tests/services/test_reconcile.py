"""The reconciler's use case on a ledger in memory: what silence becomes, what it leaves alone
(a job that is only late), what it sends again and on what evidence, and the loop."""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime, timedelta

from ledger.codes import Code, NextAction, Status
from ledger.decisions import Caller, JobRequest
from ledger.errors import DispatchError, StorageUnavailableError
from ledger.events import JobRedispatched, job_stream
from ledger.job_view import JobView, envelope
from ledger.queueing import DEFAULT_START_WITHIN_S, Evidence
from ledger.reconcile_rules import ReconcilePolicy
from ledger.runtime.ledger import Ledger
from ledger.services import jobs
from ledger.services.reconcile import Pass, ReconcileRunner, reconcile_once
from ledger.services.submit import submit
from ledger.services.work import ClaimResult, claim
from tests.factories import MarkedRecorder, Recorder
from tests.tools import RECONCILE_READS, RECONCILE_SPENDS

POLICY = ReconcilePolicy(relay_after_s=3600)  # the relay stays out of these passes' way


def accept(
    ledger: Ledger,
    tool_name: str,
    sender: object = None,
    start_within_s: float | None = None,
) -> str:
    caller = Caller(account="acme", token_id="tok")
    request = JobRequest(tool_name, {}, start_within_s=start_within_s)
    return submit(ledger, caller, request, sender).view.job_id  # type: ignore[arg-type]


def job(ledger: Ledger, job_id: str) -> JobView:
    return jobs.get(ledger, job_id)


def later(seconds: float) -> datetime:
    return datetime.now(UTC) + timedelta(seconds=seconds)


def redispatches(ledger: Ledger, job_id: str) -> list[JobRedispatched]:
    found = []
    for event in ledger.store.read_stream(job_stream(job_id)):
        if isinstance(event.payload, JobRedispatched):
            found.append(event.payload)
    return found


def test_fresh_jobs_are_left_alone(memory_ledger: Ledger) -> None:
    accept(memory_ledger, RECONCILE_READS)
    result = reconcile_once(memory_ledger, Recorder(), POLICY)
    assert (result.examined, result.recorded) == (0, [])


def test_a_late_job_is_neither_sent_again_nor_closed_before_its_deadline(
    memory_ledger: Ledger,
) -> None:
    recorder = Recorder()
    job_id = accept(memory_ledger, RECONCILE_SPENDS, recorder)
    assert recorder.sent == [job_id]  # the decision's own message, confirmed
    for seconds in (31, 95, 300, DEFAULT_START_WITHIN_S - 1):  # far past the old timer's bound
        assert reconcile_once(memory_ledger, recorder, POLICY, at=later(seconds)).recorded == []
    assert recorder.sent == [job_id]  # a confirmed message is trusted: nothing sent again
    view = job(memory_ledger, job_id)
    assert (view.status, view.dispatches) == (Status.QUEUED, 1)
    closing = reconcile_once(memory_ledger, recorder, POLICY, at=later(DEFAULT_START_WITHIN_S))
    assert closing.recorded == [f"job.outcome_missing {job_id}"]
    view = job(memory_ledger, job_id)
    assert view.error is not None
    assert (view.status, view.code, view.error.cause) == (
        Status.FAILED,
        Code.OUTCOME_MISSING,
        "never_started",
    )
    assert recorder.sent == [job_id]  # the closing pass dispatches nothing
    assert redispatches(memory_ledger, job_id) == []


def test_the_callers_start_deadline_closes_it_and_is_capped_by_the_tools(
    memory_ledger: Ledger,
) -> None:
    short = accept(memory_ledger, RECONCILE_READS, Recorder(), start_within_s=30)
    long = accept(memory_ledger, RECONCILE_READS, Recorder(), start_within_s=10**6)
    assert job(memory_ledger, short).start_within_s == 30
    assert job(memory_ledger, long).start_within_s == DEFAULT_START_WITHIN_S  # the tool's cap
    assert reconcile_once(memory_ledger, None, POLICY, at=later(29)).recorded == []
    assert reconcile_once(memory_ledger, None, POLICY, at=later(31)).recorded == [
        f"job.outcome_missing {short}"
    ]
    assert job(memory_ledger, long).status is Status.QUEUED


def test_a_queue_that_lost_its_marker_is_evidence_and_each_job_is_sent_once(
    memory_ledger: Ledger,
) -> None:
    broker = MarkedRecorder()
    assert reconcile_once(memory_ledger, broker, POLICY).recorded == []  # the first epoch
    first_epoch = broker.marker
    assert first_epoch is not None
    waiting = [accept(memory_ledger, RECONCILE_READS, broker) for _ in range(3)]
    started = accept(memory_ledger, RECONCILE_READS, broker)
    assert claim(memory_ledger, started, "w-1", lease_s=30).result is ClaimResult.CLAIMED
    assert reconcile_once(memory_ledger, broker, POLICY).recorded == []  # marker there: trusted
    broker.wipe()  # the queue was deleted (or the broker kept nothing across a restart)
    broker.sent.clear()
    found = reconcile_once(memory_ledger, broker, POLICY)
    assert found.queue_lost == first_epoch
    assert sorted(found.recorded) == sorted(f"job.redispatched {j}" for j in waiting)
    assert sorted(broker.sent) == sorted(waiting)  # the running job's message was taken
    assert broker.marker not in (None, first_epoch)  # a new epoch, marked
    for job_id in waiting:
        (again,) = redispatches(memory_ledger, job_id)
        assert again.evidence == Evidence.QUEUE_LOST.value and first_epoch in again.reason
        with memory_ledger.store.reading() as reads:
            state = reads.dispatch_state(job_id)
        assert state is not None and state.epoch == broker.marker  # under the new epoch
    assert reconcile_once(memory_ledger, broker, POLICY).recorded == []  # each sent once


def test_a_broker_that_cannot_be_asked_is_no_evidence(memory_ledger: Ledger) -> None:
    broker = MarkedRecorder()
    reconcile_once(memory_ledger, broker, POLICY)
    job_id = accept(memory_ledger, RECONCILE_READS, broker)
    broker.away = True
    broker.wipe()
    assert reconcile_once(memory_ledger, broker, POLICY).recorded == []
    assert redispatches(memory_ledger, job_id) == []


def test_a_rejected_delivery_is_sent_again_after_a_backoff(memory_ledger: Ledger) -> None:
    recorder = Recorder()
    job_id = accept(memory_ledger, RECONCILE_READS, recorder)
    with memory_ledger.store.transaction() as tx:
        tx.reject_dispatch(job_id, 1, "w-1: StorageError: denied", datetime.now(UTC))
    policy = ReconcilePolicy(relay_after_s=3600, rejected_backoff_s=10)
    assert reconcile_once(memory_ledger, recorder, policy, at=later(5)).recorded == []
    again = reconcile_once(memory_ledger, recorder, policy, at=later(11))
    assert again.recorded == [f"job.redispatched {job_id}"]
    assert recorder.sent == [job_id, job_id]
    (redispatched,) = redispatches(memory_ledger, job_id)
    assert redispatched.evidence == Evidence.WORKER_REJECTED.value
    assert "StorageError: denied" in redispatched.reason
    # The new message's confirmation replaced the rejection: no evidence any more.
    assert reconcile_once(memory_ledger, recorder, policy, at=later(300)).recorded == []


def test_an_unconfirmed_job_is_relayed_without_an_event(memory_ledger: Ledger) -> None:
    job_id = accept(memory_ledger, RECONCILE_READS)  # decided; no process published it
    recorder = Recorder()
    soon = ReconcilePolicy(relay_after_s=0.05)
    assert reconcile_once(memory_ledger, recorder, soon).relayed == 0  # its decider's time
    time.sleep(0.06)  # the relay's delay is measured on the real clock
    relayed = reconcile_once(memory_ledger, recorder, soon)
    assert (relayed.relayed, relayed.recorded, recorder.sent) == (1, [], [job_id])
    assert reconcile_once(memory_ledger, recorder, soon).relayed == 0  # confirmed now
    assert job(memory_ledger, job_id).dispatches == 1  # a first dispatch, not a re-dispatch


def test_a_broker_away_at_submit_leaves_the_job_to_the_relay(memory_ledger: Ledger) -> None:
    job_id = accept(memory_ledger, RECONCILE_READS, Flaky())
    soon = ReconcilePolicy(relay_after_s=0.0)
    failed = reconcile_once(memory_ledger, Flaky(), soon)
    assert (failed.relayed, failed.dispatch_failures) == (0, 1)
    recorder = Recorder()  # the broker is back
    assert reconcile_once(memory_ledger, recorder, soon).relayed == 1
    assert recorder.sent == [job_id] and redispatches(memory_ledger, job_id) == []


def expire_lease(ledger: Ledger, job_id: str) -> None:
    """What a frozen worker leaves behind: a lease nobody renews."""
    attempt = job(ledger, job_id).attempts
    with ledger.store.transaction() as tx:
        past = datetime.now(UTC) - timedelta(seconds=1)
        tx.start_lease(job_id, attempt, "frozen-worker", past)


def test_lost_worker_on_a_spending_tool_is_never_rerun(memory_ledger: Ledger) -> None:
    job_id = accept(memory_ledger, RECONCILE_SPENDS)
    assert claim(memory_ledger, job_id, "w-1", lease_s=30).result is ClaimResult.CLAIMED
    recorder = Recorder()
    assert reconcile_once(memory_ledger, recorder, POLICY).recorded == []  # lease still valid
    expire_lease(memory_ledger, job_id)
    result = reconcile_once(memory_ledger, recorder, POLICY)
    assert result.recorded == [f"job.outcome_missing {job_id}"] and recorder.sent == []
    env = envelope(job(memory_ledger, job_id))
    assert env.error is not None and env.error.cause == "worker_lost"
    assert (env.status, env.next_action, env.recorded_by) == (
        Status.FAILED,
        NextAction.VERIFY_AT_SOURCE,
        "reconciler",
    )


def test_lost_worker_on_a_reading_tool_gets_its_next_attempt(memory_ledger: Ledger) -> None:
    job_id = accept(memory_ledger, RECONCILE_READS)
    claim(memory_ledger, job_id, "w-1", lease_s=30)
    expire_lease(memory_ledger, job_id)
    recorder = Recorder()
    result = reconcile_once(memory_ledger, recorder, POLICY)
    assert result.recorded == [f"work.retry_scheduled {job_id}"] and recorder.sent == [job_id]
    retrying = job(memory_ledger, job_id)
    assert retrying.status is Status.RETRYING and retrying.start_by is not None
    assert claim(memory_ledger, job_id, "w-2", lease_s=30).result is ClaimResult.CLAIMED
    expire_lease(memory_ledger, job_id)
    # max_attempts (2) used up: now the silence is recorded as a failure.
    assert reconcile_once(memory_ledger, recorder, POLICY).recorded == [
        f"job.outcome_missing {job_id}"
    ]
    view = job(memory_ledger, job_id)
    assert (view.attempts, view.next_action) == (2, "stop_and_report")


class Flaky:
    """A dispatcher whose broker is down."""

    def dispatch(self, job_id: str, delay_s: float = 0.0) -> None:
        raise DispatchError("broker down")


def test_the_runner_survives_a_failed_pass_and_stops_when_told(memory_ledger: Ledger) -> None:
    job_id = accept(memory_ledger, RECONCILE_READS, start_within_s=1)
    recorder = Recorder()
    runner = ReconcileRunner(memory_ledger, recorder, POLICY, interval_s=0.01)
    calls = {"n": 0}
    real_once = runner.run_once

    def flaky_once() -> Pass:
        calls["n"] += 1
        if calls["n"] == 1:
            raise StorageUnavailableError("the database went away")
        return real_once()

    runner.run_once = flaky_once  # type: ignore[method-assign]
    errors: list[Exception] = []
    passes: list[Pass] = []

    def on_pass(result: Pass) -> None:
        passes.append(result)
        if result.recorded:
            runner.stop()

    thread = threading.Thread(target=runner.run, args=(on_pass, errors.append))
    thread.start()
    thread.join(timeout=10)
    assert not thread.is_alive()
    assert [type(e) for e in errors] == [StorageUnavailableError]
    assert passes[-1].recorded == [f"job.outcome_missing {job_id}"]

"""The reconciler's use case on a ledger in memory: what silence becomes, and the loop."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta

from ledger.codes import Code, NextAction, Status
from ledger.decisions import Caller, JobRequest
from ledger.errors import DispatchError, StorageUnavailableError
from ledger.job_view import JobView, envelope
from ledger.reconcile_rules import ReconcilePolicy
from ledger.services import jobs
from ledger.services.ledger import Ledger
from ledger.services.reconcile import Pass, ReconcileRunner, reconcile_once
from ledger.services.submit import submit
from ledger.services.work import ClaimResult, claim
from tests.factories import Recorder
from tests.tools import RECONCILE_READS, RECONCILE_SPENDS

POLICY = ReconcilePolicy(dispatch_timeout_s=10, max_dispatches=2)


def accept(ledger: Ledger, tool_name: str) -> str:
    caller = Caller(account="acme", token_id="tok")
    return submit(ledger, caller, JobRequest(tool_name, {})).view.job_id


def job(ledger: Ledger, job_id: str) -> JobView:
    return jobs.get(ledger, job_id)


def later(seconds: float) -> datetime:
    return datetime.now(UTC) + timedelta(seconds=seconds)


def test_fresh_jobs_are_left_alone(memory_ledger: Ledger) -> None:
    accept(memory_ledger, RECONCILE_READS)
    result = reconcile_once(memory_ledger, Recorder(), POLICY)
    assert (result.examined, result.recorded) == (0, [])


def test_never_started_is_redispatched_then_closed(memory_ledger: Ledger) -> None:
    job_id = accept(memory_ledger, RECONCILE_SPENDS)
    recorder = Recorder()
    first = reconcile_once(memory_ledger, recorder, POLICY, at=later(11))
    assert first.recorded == [f"job.redispatched {job_id}"] and recorder.sent == [job_id]
    # The re-dispatch restarts the deadline (from when it was recorded); past it, the bound.
    assert reconcile_once(memory_ledger, recorder, POLICY, at=later(5)).recorded == []
    closing = reconcile_once(memory_ledger, recorder, POLICY, at=later(25))
    assert closing.recorded == [f"job.outcome_missing {job_id}"]
    view = job(memory_ledger, job_id)
    assert view.error is not None
    assert (view.status, view.code, view.error.cause) == (
        Status.FAILED,
        Code.OUTCOME_MISSING,
        "never_started",
    )
    assert recorder.sent == [job_id]  # the closing pass dispatches nothing


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


def test_a_failed_redispatch_is_counted_and_tried_again(memory_ledger: Ledger) -> None:
    job_id = accept(memory_ledger, RECONCILE_READS)
    policy = ReconcilePolicy(dispatch_timeout_s=10, max_dispatches=3)
    failed = reconcile_once(memory_ledger, Flaky(), policy, at=later(11))
    assert failed.recorded == [f"job.redispatched {job_id}"] and failed.dispatch_failures == 1
    recorder = Recorder()  # the broker is back: the job, still not started, is sent again
    again = reconcile_once(memory_ledger, recorder, policy, at=later(25))
    assert again.recorded == [f"job.redispatched {job_id}"] and recorder.sent == [job_id]
    assert job(memory_ledger, job_id).dispatches == 3


def test_the_runner_survives_a_failed_pass_and_stops_when_told(memory_ledger: Ledger) -> None:
    job_id = accept(memory_ledger, RECONCILE_READS)
    recorder = Recorder()
    policy = ReconcilePolicy(dispatch_timeout_s=0.01, max_dispatches=5)
    runner = ReconcileRunner(memory_ledger, recorder, policy, interval_s=0.01)
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
    assert passes[-1].recorded == [f"job.redispatched {job_id}"] and recorder.sent == [job_id]

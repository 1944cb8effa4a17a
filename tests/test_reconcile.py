"""Reconcile rules (pure) and the runner against a real store on each backend."""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime, timedelta

from pydantic import BaseModel
from sqlalchemy import update

from ledger.codes import Code, NextAction, Status
from ledger.decisions import Caller, JobRequest
from ledger.events import job_stream
from ledger.job_view import envelope
from ledger.outcomes import Succeeded
from ledger.persistence.jobs import get_job
from ledger.persistence.reconcile import reconcile_once
from ledger.persistence.schema import leases
from ledger.persistence.store import EventStore
from ledger.persistence.submit import submit
from ledger.persistence.work import ClaimResult, claim
from ledger.reconcile_rules import ReconcilePolicy
from ledger.tools import ToolContext, tool

POLICY = ReconcilePolicy(dispatch_timeout_s=10, max_dispatches=2)


class NoArgs(BaseModel):
    pass


@tool("test.reconcile_spends", spends=True)
def spends(args: NoArgs, ctx: ToolContext) -> Succeeded:
    return Succeeded()


@tool("test.reconcile_reads", spends=False, max_attempts=2)
def reads(args: NoArgs, ctx: ToolContext) -> Succeeded:
    return Succeeded()


class Recorder:
    def __init__(self) -> None:
        self.sent: list[str] = []

    def dispatch(self, job_id: str, delay_s: float = 0.0) -> None:
        self.sent.append(job_id)


def accept(store: EventStore, tool_name: str) -> str:
    caller = Caller(account="acme", token_id="tok")
    return submit(store, caller, JobRequest(tool_name, {})).view.job_id


def later(seconds: float) -> datetime:
    return datetime.now(UTC) + timedelta(seconds=seconds)


def test_fresh_jobs_are_left_alone(store: EventStore) -> None:
    accept(store, "test.reconcile_reads")
    result = reconcile_once(store, Recorder(), POLICY)
    assert (result.examined, result.recorded) == (0, [])


def test_never_started_is_redispatched_then_closed(store: EventStore) -> None:
    job_id = accept(store, "test.reconcile_spends")
    recorder = Recorder()
    first = reconcile_once(store, recorder, POLICY, now=later(11))
    assert first.recorded == [f"job.redispatched {job_id}"] and recorder.sent == [job_id]
    # The re-dispatch restarts the deadline (from when it was recorded); past it, the bound.
    assert reconcile_once(store, recorder, POLICY, now=later(5)).recorded == []
    closing = reconcile_once(store, recorder, POLICY, now=later(25))
    assert closing.recorded == [f"job.outcome_missing {job_id}"]
    view = get_job(store, job_id)
    assert view is not None and view.error is not None
    assert (view.status, view.code, view.error.cause) == (
        Status.FAILED,
        Code.OUTCOME_MISSING,
        "never_started",
    )
    assert recorder.sent == [job_id]  # the closing pass dispatches nothing


def expire_lease(store: EventStore, job_id: str) -> None:
    with store.transaction() as tx:
        past = datetime.now(UTC) - timedelta(seconds=1)
        tx.conn.execute(update(leases).where(leases.c.job_id == job_id).values(expires_at=past))


def test_lost_worker_on_a_spending_tool_is_never_rerun(store: EventStore) -> None:
    job_id = accept(store, "test.reconcile_spends")
    assert claim(store, job_id, "w-1", lease_s=30).result is ClaimResult.CLAIMED
    recorder = Recorder()
    assert reconcile_once(store, recorder, POLICY).recorded == []  # lease still valid
    expire_lease(store, job_id)
    result = reconcile_once(store, recorder, POLICY)
    assert result.recorded == [f"job.outcome_missing {job_id}"] and recorder.sent == []
    env = envelope(get_job(store, job_id))  # type: ignore[arg-type]
    assert env.error is not None and env.error.cause == "worker_lost"
    assert (env.status, env.next_action, env.recorded_by) == (
        Status.FAILED,
        NextAction.VERIFY_AT_SOURCE,
        "reconciler",
    )


def test_lost_worker_on_a_reading_tool_gets_its_next_attempt(store: EventStore) -> None:
    job_id = accept(store, "test.reconcile_reads")
    claim(store, job_id, "w-1", lease_s=30)
    expire_lease(store, job_id)
    recorder = Recorder()
    result = reconcile_once(store, recorder, POLICY)
    assert result.recorded == [f"work.retry_scheduled {job_id}"] and recorder.sent == [job_id]
    assert claim(store, job_id, "w-2", lease_s=30).result is ClaimResult.CLAIMED
    expire_lease(store, job_id)
    # max_attempts (2) used up: now the silence is recorded as a failure.
    assert reconcile_once(store, recorder, POLICY).recorded == [f"job.outcome_missing {job_id}"]
    view = get_job(store, job_id)
    assert view is not None and (view.attempts, view.next_action) == (2, "stop_and_report")


def test_concurrent_reconcilers_record_each_finding_once(store: EventStore) -> None:
    # Real clock: a reconciler that looks after another's re-dispatch must see a fresh job.
    policy = ReconcilePolicy(dispatch_timeout_s=3, max_dispatches=3)
    job_ids = [accept(store, "test.reconcile_reads") for _ in range(20)]
    overdue_at = datetime.now(UTC) + timedelta(seconds=3.1)
    while datetime.now(UTC) < overdue_at:  # wait until the jobs are overdue
        time.sleep(0.05)
    barrier = threading.Barrier(4)
    results = []

    def run() -> None:
        barrier.wait(timeout=30)
        results.append(reconcile_once(store, Recorder(), policy))

    threads = [threading.Thread(target=run) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    recorded = [line for r in results for line in r.recorded]
    assert sorted(recorded) == sorted(f"job.redispatched {j}" for j in job_ids)
    assert sum(r.lost_races for r in results) + len(recorded) >= len(job_ids)
    for job_id in job_ids:
        types = [e.type for e in store.read_stream(job_stream(job_id))]
        assert types == ["job.accepted", "job.redispatched"]

"""Worker loss with real processes (issue 4; reliability scenarios 1, 8 and 9).

Real `outcomes worker` processes on RabbitMQ and a Postgres ledger, with short leases
(`LEASE_S`): a worker killed with SIGKILL mid spending tool, a worker killed after it received
a message but before its claim, a worker frozen with SIGSTOP past its lease and then resumed,
and a poison job that kills its worker process on every attempt. After each scenario the
reconciler runs to a fixed point and the total-queue checker must count nothing lost,
duplicated or unexpected, and at most one side effect per spending job.
"""

from __future__ import annotations

import os
import signal
import time
from collections import Counter

import pytest

from ledger.codes import Code, NextAction, OutcomeMissingCause, Status
from ledger.job_view import envelope
from ledger.persistence.base import BRAKES_LOCK
from tests.plugins.deployments import deployments, stream_types, wait_terminal, wait_until
from tests.plugins.rigs import (
    LEASE_S,
    Rig,
    child_pids,
    claims_waiting_on_the_brake_lock,
    elapsed_since,
    load_view,
    reconcile_until,
)
from tests.reliability.checker import fast_policy, settle
from tests.tools import POISON_MAX_ATTEMPTS

RABBITMQ = deployments("rabbitmq/postgres")
INTERVAL_S = 1.0  # the `outcomes reconcile --interval` of scenario 1
# The contract: closed within lease + one interval of the kill. The bound doubles it, so that
# a loaded machine's scheduling and polling cannot fail the test; it stays far below the
# defaults (30 s lease, 5 s interval) that a missing lease check would fall back to.
KILL_TO_CLOSED_BOUND_S = 2 * (LEASE_S + INTERVAL_S)
LOST_SPENDING = ["job.accepted", "work.started", "job.outcome_missing"]


def assert_worker_lost_spending(rig: Rig, job_id: str) -> None:
    view = load_view(rig.store, job_id)
    body = envelope(view).model_dump(mode="json")
    assert (body["status"], body["terminal"], body["attempts"]) == ("failed", True, 1), body
    assert body["next_action"] == NextAction.VERIFY_AT_SOURCE.value, body
    assert body["recorded_by"] == "reconciler", body
    assert body["error"]["code"] == Code.OUTCOME_MISSING.value, body
    assert body["error"]["cause"] == OutcomeMissingCause.WORKER_LOST.value, body


@pytest.mark.parametrize("deployment", RABBITMQ, indirect=True)
def test_kill_9_mid_spending_tool(rig: Rig) -> None:
    """The worker's pool process dies mid-tool; its message goes back to the queue
    (reject_on_worker_lost) and is delivered again, but the claim refuses a second run: the
    reconciler process closes the job OUTCOME_MISSING/worker_lost, verify_at_source."""
    dep, store = rig.dep, rig.store
    reconciler = rig.start_reconciler(INTERVAL_S, dispatch_timeout_s=2.0)
    (worker,) = dep.start_workers(count=1, concurrency=2, pool="prefork")
    reconciler.wait_looping()
    job = dep.submit("rtest.slow_charge", {"seconds": 30})
    wait_until(lambda: bool(rig.effects(job.job_id)), 30, "the tool to spend")
    (effect,) = rig.effects(job.job_id)
    assert effect.pid in child_pids(worker.process.pid), "the tool runs in a pool process"
    assert load_view(store, job.job_id).status is Status.RUNNING

    killed_at = time.monotonic()
    os.kill(effect.pid, signal.SIGKILL)
    wait_terminal(store, [job.job_id], timeout_s=KILL_TO_CLOSED_BOUND_S + 30)
    closed_after = elapsed_since(killed_at)

    assert closed_after <= KILL_TO_CLOSED_BOUND_S, (
        f"closed {closed_after:.2f}s after the kill; lease {LEASE_S}s + interval {INTERVAL_S}s"
    )
    assert_worker_lost_spending(rig, job.job_id)
    # The requeued message was delivered again, and the claim skipped it.
    wait_until(
        lambda: f"job {job.job_id}: skipped" in dep.worker_logs(),
        30,
        "the redelivered message to be handled",
    )
    assert "WorkerLostError" in dep.worker_logs()
    assert stream_types(store, job.job_id) == LOST_SPENDING
    assert [e.job_id for e in rig.effects()] == [job.job_id]
    assert worker.process.poll() is None, "the worker survives the loss of a pool process"
    (missing,) = [
        e for e in store.read_stream(f"job-{job.job_id}") if e.type == "job.outcome_missing"
    ]
    assert missing.actor == "reconciler"
    print(
        f"[timing] kill -9 -> closed {closed_after:.2f}s (lease {LEASE_S}s, interval "
        f"{INTERVAL_S}s, bound {KILL_TO_CLOSED_BOUND_S}s); ledger: "
        f"{missing.recorded_at.timestamp() - effect.at:.2f}s after the tool spent"
    )
    reconciler.stop()
    rig.settle_and_check("kill -9 mid spending tool")


@pytest.mark.parametrize("victim", ["pool_process", "whole_worker", "whole_worker_gone"])
@pytest.mark.parametrize("deployment", RABBITMQ, indirect=True)
def test_kill_9_after_receive_before_claim(rig: Rig, victim: str) -> None:
    """Hold the brake lock exclusively (as `brake pull` does): a worker that received the job
    waits inside `claim`, where nothing is recorded yet. Kill it there. The message is not
    lost: the pool's replacement or a new worker runs the job exactly once, or, with no worker
    left at all, the job waits in the queue, told as late, until its start deadline, when the
    reconciler surfaces it as never_started."""
    dep, store = rig.dep, rig.store
    # Submitted before the lock (a submit checks the brakes under it, shared) and before any
    # worker, so that the job's message waits for the worker started under the lock.
    deadline = 3.0 if victim == "whole_worker_gone" else None
    job = dep.submit("rtest.slow_charge", {"seconds": 0}, start_within_s=deadline)
    with store.transaction() as tx:
        tx.lock(BRAKES_LOCK)  # exclusive, as `brake pull` takes it
        (worker,) = dep.start_workers(count=1, concurrency=1, pool="prefork")
        wait_until(
            lambda: bool(claims_waiting_on_the_brake_lock(store)),
            30,
            "the worker to receive the job and wait inside its claim",
        )
        first = claims_waiting_on_the_brake_lock(store)
        if victim == "pool_process":
            (pool_process,) = child_pids(worker.process.pid)
            os.kill(pool_process, signal.SIGKILL)
        else:
            os.killpg(worker.process.pid, signal.SIGKILL)
            worker.process.wait(timeout=10)
        if victim != "whole_worker_gone":
            if victim == "whole_worker":
                dep.start_workers(count=1, concurrency=1, pool="prefork")
            wait_until(
                lambda: bool(claims_waiting_on_the_brake_lock(store) - first),
                30,
                "the requeued message to reach a claim again",
            )
        assert stream_types(store, job.job_id) == ["job.accepted"]
        assert rig.effects() == []
    # The lock is released: the waiting claim goes on (the killed one's backend finds no
    # client and rolls back).

    if victim == "whole_worker_gone":
        settle(store, dep.dispatcher, fast_policy(), timeout_s=30)
        view = load_view(store, job.job_id)
        assert view.status is Status.FAILED and view.error is not None, view
        assert (view.error.code, view.error.cause) == (Code.OUTCOME_MISSING, "never_started")
        # Its message went back to the queue when the worker died: trusted, never sent again.
        assert stream_types(store, job.job_id) == ["job.accepted", "job.outcome_missing"]
        assert rig.effects() == []
    else:
        done = wait_terminal(store, [job.job_id], timeout_s=30)[job.job_id]
        assert done.status is Status.SUCCEEDED, done
        assert stream_types(store, job.job_id) == [
            "job.accepted",
            "work.started",
            "work.succeeded",
        ]
        assert [e.job_id for e in rig.effects()] == [job.job_id]
    rig.settle_and_check(f"kill -9 after receive, before claim ({victim})")


@pytest.mark.parametrize("deployment", RABBITMQ, indirect=True)
def test_sigstop_past_the_lease_then_sigcont_records_a_late_outcome(rig: Rig) -> None:
    """A worker frozen mid spending tool stops renewing its lease; the reconciler closes the job.
    Thawed, the worker finishes and reports: kept as work.late_outcome, status unchanged."""
    dep, store = rig.dep, rig.store
    (worker,) = dep.start_workers(count=1, concurrency=1, pool="prefork")
    job = dep.submit("rtest.slow_charge", {"seconds": 1.5})
    wait_until(lambda: bool(rig.effects(job.job_id)), 30, "the tool to spend")
    rig.freeze(worker)
    frozen_at = time.monotonic()

    settle(store, dep.dispatcher, fast_policy(), timeout_s=30)  # the reconciler, in-process
    closed_after = elapsed_since(frozen_at)
    assert_worker_lost_spending(rig, job.job_id)
    closed = load_view(store, job.job_id)
    assert closed.late_outcomes == []

    rig.thaw(worker)
    wait_until(lambda: bool(load_view(store, job.job_id).late_outcomes), 30, "the late outcome")
    late = load_view(store, job.job_id)
    unchanged = ("status", "error", "attempts", "result", "recorded_by")
    assert {k: getattr(late, k) for k in unchanged} == {k: getattr(closed, k) for k in unchanged}
    body = envelope(late).model_dump(mode="json")
    assert body["status"] == "failed" and body["next_action"] == "verify_at_source", body
    (kept,) = body["late_outcomes"]
    assert (kept["attempt"], kept["type"]) == (1, "work.succeeded"), kept
    assert kept["result"]["charged"] == 1, kept
    assert stream_types(store, job.job_id) == [*LOST_SPENDING, "work.late_outcome"]
    late_event = store.read_stream(f"job-{job.job_id}")[-1]
    assert late_event.actor != "reconciler" and late_event.data["outcome_type"] == "work.succeeded"
    assert [e.job_id for e in rig.effects()] == [job.job_id]
    print(f"[timing] SIGSTOP -> closed by the reconciler {closed_after:.2f}s (lease {LEASE_S}s)")
    rig.settle_and_check("SIGSTOP past the lease, then SIGCONT")


@pytest.mark.parametrize("deployment", RABBITMQ, indirect=True)
def test_a_late_outcome_does_not_make_the_next_attempt_late(rig: Rig) -> None:
    """Scenario 8 with a tool that does not spend: the frozen worker's attempt 1 is lost, the
    reconciler schedules attempt 2 and the other worker runs it. Thawed while attempt 2 runs,
    the first worker reports: that outcome is late. Attempt 2 reports on time: it is the
    job's outcome."""
    dep, store = rig.dep, rig.store
    dep.env["OUTCOMES_PREFETCH"] = "1"  # a frozen worker holds its one message, takes no more
    workers = dep.start_workers(count=2, concurrency=1, pool="prefork")
    job = dep.submit("rtest.slow_probe", {"seconds": 4})
    wait_until(lambda: bool(rig.effects(job.job_id)), 30, "attempt 1 to start")
    (first,) = rig.effects(job.job_id)
    (frozen,) = [w for w in workers if first.pid in child_pids(w.process.pid)]
    rig.freeze(frozen)

    def second_attempt_running() -> bool:
        view = load_view(store, job.job_id)
        return view.status is Status.RUNNING and view.attempts == 2

    reconcile_until(
        store, dep.dispatcher, fast_policy(), second_attempt_running, 30, "attempt 2 to start"
    )
    rig.thaw(frozen)
    wait_until(
        lambda: bool(load_view(store, job.job_id).late_outcomes), 30, "attempt 1's late outcome"
    )
    assert second_attempt_running(), "attempt 1 reported while attempt 2 still runs"

    def attempt_two_reported() -> bool:
        view = load_view(store, job.job_id)
        return view.terminal or len(view.late_outcomes) == 2

    wait_until(attempt_two_reported, 30, "attempt 2 to report")
    settle(store, dep.dispatcher, fast_policy(), timeout_s=30)
    view = load_view(store, job.job_id)
    stream = stream_types(store, job.job_id)
    assert [e.attempt for e in rig.effects(job.job_id)] == [1, 2]
    late = [(o["attempt"], o["type"]) for o in view.late_outcomes]
    assert late == [(1, "work.succeeded")], (late, view.status, view.code, stream)
    assert (view.status, view.attempts, view.result) == (
        Status.SUCCEEDED,
        2,
        {"attempt": 2, "pid": rig.effects(job.job_id)[1].pid},
    ), stream
    rig.settle_and_check("late outcome while the next attempt runs")


@pytest.mark.parametrize("deployment", RABBITMQ, indirect=True)
def test_a_poison_job_that_kills_its_worker_every_time_is_bounded(rig: Rig) -> None:
    """Each attempt kills the pool process that runs it; the requeued message is skipped by the
    claim, the reconciler schedules the next attempt when the lease runs out, and after
    max_attempts it closes the job. The workers survive; Celery's pool replaces the dead."""
    dep, store = rig.dep, rig.store
    workers = dep.start_workers(count=2, concurrency=1, pool="prefork")
    job = dep.submit("rtest.poison", {})
    started_at = time.monotonic()

    settle(store, dep.dispatcher, fast_policy(), timeout_s=60)  # drives the attempts
    took = elapsed_since(started_at)
    view = load_view(store, job.job_id)
    assert view.status is Status.FAILED and view.error is not None, view
    assert (view.error.code, view.error.cause) == (Code.OUTCOME_MISSING, "worker_lost")
    assert view.attempts == POISON_MAX_ATTEMPTS
    assert envelope(view).next_action is NextAction.STOP_AND_REPORT
    types = Counter(stream_types(store, job.job_id))
    assert types["work.started"] == POISON_MAX_ATTEMPTS, types
    assert types["work.retry_scheduled"] == POISON_MAX_ATTEMPTS - 1, types
    assert types["job.outcome_missing"] == 1, types
    attempts = [e.attempt for e in rig.effects(job.job_id)]
    assert attempts == list(range(1, POISON_MAX_ATTEMPTS + 1)), attempts
    killed = {e.pid for e in rig.effects(job.job_id)}

    assert [w.process.poll() for w in workers] == [None, None], dep.worker_logs()[-3000:]
    wait_until(
        lambda: all(len(child_pids(w.process.pid)) == 1 for w in workers),
        30,
        "each worker's pool to have replaced its killed process",
    )
    pools = {pid for w in workers for pid in child_pids(w.process.pid)}
    assert killed.isdisjoint(pools), (killed, pools)
    healthy = dep.submit("rtest.slow_charge", {"seconds": 0})
    assert wait_terminal(store, [healthy.job_id])[healthy.job_id].status is Status.SUCCEEDED
    print(f"[timing] poison job closed after {len(attempts)} attempts in {took:.2f}s")
    rig.settle_and_check("poison job kills its worker on every attempt")

"""Cancelling calls end to end, on Postgres and RabbitMQ with a real `outcomes worker` process
(docs/cancel.md): a queued job cancelled before a worker reaches it ends declined and never
starts, and the worker acknowledges and drops its message; cancels racing a live worker's
claims each leave exactly one story (cancelled and never started, or started and the cancel
refused); a running job's cancel is refused and the job goes on to succeed."""

from __future__ import annotations

from contextlib import suppress

import pytest

from ledger.codes import Status
from ledger.errors import NotCancellableError
from ledger.runtime.ledger import Ledger
from ledger.services.cancel import Canceller, cancel
from tests.plugins.deployments import (
    Deployment,
    count_events,
    deployments,
    stream_types,
    wait_terminal,
    wait_until,
)

BY_AGENT = Canceller("acme", "agent", "tok-agent")
CHARGE = "itest.charge"  # spends: a start would show as a side effect


def ready_messages(deployment: Deployment) -> int:
    """Messages left in the test's queue (a passive declare: it creates nothing)."""
    with deployment.app.connection_for_read() as conn:
        channel = conn.channel()
        try:
            return int(channel.queue_declare(queue=deployment.queue, passive=True).message_count)
        finally:
            with suppress(Exception):
                channel.close()


@pytest.mark.parametrize("deployment", deployments("rabbitmq/postgres"), indirect=True)
def test_cancelled_jobs_never_start_and_running_ones_go_on(deployment: Deployment) -> None:
    store, ledger = deployment.store, Ledger(deployment.store)
    queued = [deployment.submit(CHARGE, {"amount": i}) for i in range(6)]
    cancelled, kept = queued[::2], queued[1::2]
    for view in cancelled:
        assert cancel(ledger, view.job_id, BY_AGENT, "not needed").status is Status.DECLINED

    deployment.start_workers(count=1)
    done = wait_terminal(store, [v.job_id for v in queued], timeout_s=60)
    for view in kept:
        assert done[view.job_id].status is Status.SUCCEEDED
    for view in cancelled:
        assert stream_types(store, view.job_id) == ["job.accepted", "work.declined"]
    # Each cancelled job's message reached the worker, whose claim skipped it: acked, unrun.
    wait_until(
        lambda: all(f"job {v.job_id}: skipped" in deployment.worker_logs() for v in cancelled),
        30,
        "the worker to drop the cancelled jobs' messages",
    )

    # Cancels racing the live worker's claims: one story per job, whichever committed first.
    racing = [deployment.submit(CHARGE, {"amount": 100 + i}) for i in range(12)]
    refused: set[str] = set()
    for view in racing:
        try:
            cancel(ledger, view.job_id, BY_AGENT, "race")
        except NotCancellableError:
            refused.add(view.job_id)
    raced = wait_terminal(store, [v.job_id for v in racing], timeout_s=60)
    for job_id, view in raced.items():
        if job_id in refused:
            assert view.status is Status.SUCCEEDED, view
            assert stream_types(store, job_id) == ["job.accepted", "work.started", "work.succeeded"]
        else:
            assert view.status is Status.DECLINED and view.cancelled is not None, view
            assert stream_types(store, job_id) == ["job.accepted", "work.declined"]

    # A running job: the cancel is refused with its envelope; it goes on and succeeds.
    slow = deployment.submit(CHARGE, {"amount": 999, "delay_s": 1.0})
    wait_until(lambda: "work.started" in stream_types(store, slow.job_id), 30, "the slow start")
    with pytest.raises(NotCancellableError) as running:
        cancel(ledger, slow.job_id, BY_AGENT)
    assert running.value.envelope["status"] == "running"
    assert wait_terminal(store, [slow.job_id])[slow.job_id].status is Status.SUCCEEDED

    ran = {v.job_id for v in kept} | refused | {slow.job_id}
    assert sorted(deployment.side_effect_jobs()) == sorted(ran)  # nothing cancelled ran
    assert count_events(store, "work.started") == len(ran)
    deployment.stop_workers()
    assert ready_messages(deployment) == 0  # every message acknowledged, none handed back

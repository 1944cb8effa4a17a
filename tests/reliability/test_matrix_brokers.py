"""Reliability matrix, brokers (scenarios 3 to 5): redelivery and outages of the broker.

Real `outcomes worker` processes on a real broker and a Postgres ledger. After each scenario
the reconciler runs to a fixed point and the total-queue check must be clean.
"""

from __future__ import annotations

import logging
import time
from collections import Counter

import pytest

import tests.tools  # noqa: F401  (the test process submits to these tools)
from ledger.codes import Status
from ledger.decisions import JobRequest
from ledger.runtime.ledger import Ledger
from ledger.runtime.outbox import Outbox
from ledger.services.submit import submit
from tests.plugins.deployments import (
    AGENT,
    Deployment,
    deployments,
    load_views,
    stream_types,
    wait_terminal,
)
from tests.plugins.matrix import (
    AMQP_URL,
    delete_queue,
    deployment_verdict,
    prepare,
    rabbit_start_app,
    rabbit_stop_app,
    read_marks,
    redis_shutdown,
    redis_start,
    require_control,
    services_restored,
    wait_for,
)

# Stops or restarts a shared service: runs alone, after the parallel part of `make test`.
pytestmark = pytest.mark.serial

STARTED_ONCE = ["job.accepted", "work.started", "work.succeeded"]


def skipped_in(log: str, job_id: str) -> int:
    """How many deliveries of this job a worker handled without running it."""
    return log.count(f"job {job_id}: skipped")


# --- 3. Redis redelivers a message while the tool still runs ----------------------------------


@pytest.mark.parametrize("deployment", deployments("redis/postgres"), indirect=True)
def test_redis_visibility_timeout_shorter_than_the_run(deployment: Deployment) -> None:
    dep = deployment
    marks = prepare(
        dep,
        OUTCOMES_REDIS_VISIBILITY_S="2",  # the tools run ~5 s
        MATRIX_REDIS_RESTORE_EVERY_S="1",
        OUTCOMES_PREFETCH="1",  # a busy worker holds no second message: an idle one gets it
    )
    busy = dep.start_workers(count=2, concurrency=1)
    free = dep.submit("matrix.read", {"seconds": 5})
    spend = dep.submit("matrix.charge", {"seconds": 5})
    ids = [free.job_id, spend.job_id]
    wait_for(lambda: len(read_marks(marks)) == 2, 30, "both tools to start")
    idle = dep.start_workers(count=1, concurrency=1)[0]  # the one that gets the redeliveries

    done = wait_terminal(dep.store, ids, timeout_s=60)
    wait_for(
        lambda: all(skipped_in(dep.worker_logs(), j) >= 1 for j in ids),
        30,
        "Redis to redeliver both messages past their visibility timeout",
    )

    counters = deployment_verdict(dep, "3 redis visibility < run")
    assert {done[j].status for j in ids} == {Status.SUCCEEDED}
    for job_id in ids:
        assert stream_types(dep.store, job_id) == STARTED_ONCE
    assert Counter(dep.side_effect_jobs()) == Counter(ids)  # each tool ran exactly once
    # The redeliveries went to the idle worker, which did not run the tools again.
    assert all(skipped_in(idle.log(), j) >= 1 for j in ids), idle.log()[-3000:]
    assert not any(f"job {j}: claimed" in idle.log() for j in ids)
    assert sum("claimed" in w.log() for w in busy) == 2
    assert counters.by_status == {"work.succeeded": 2}


# --- 4. RabbitMQ restarted mid-task (late acks) -----------------------------------------------


@pytest.mark.parametrize("deployment", deployments("rabbitmq/postgres"), indirect=True)
def test_rabbitmq_restarted_mid_task(deployment: Deployment) -> None:
    require_control("rabbitmqctl")
    dep = deployment
    marks = prepare(dep)
    dep.start_workers(count=2, concurrency=1)
    slow = [
        dep.submit("matrix.charge", {"seconds": 4}),
        dep.submit("matrix.read", {"seconds": 4}),
    ]
    wait_for(lambda: len(read_marks(marks)) == 2, 30, "both slow tools to start")
    queued = [
        dep.submit("matrix.charge" if i % 2 else "matrix.read", {"note": str(i)}) for i in range(20)
    ]
    ids = [v.job_id for v in [*slow, *queued]]
    slow_ids = [v.job_id for v in slow]
    try:
        with services_restored():
            rabbit_stop_app()
            # The slow tools finish while the broker is down: their acks cannot be delivered.
            wait_terminal(dep.store, slow_ids, timeout_s=30)
            rabbit_start_app(AMQP_URL)
        done = wait_terminal(dep.store, ids, timeout_s=90)
        wait_for(
            lambda: all(skipped_in(dep.worker_logs(), j) >= 1 for j in slow_ids),
            60,
            "the unacked messages of the finished jobs to be redelivered",
        )
        counters = deployment_verdict(dep, "4 rabbitmq restarted mid-task")
    finally:
        dep.stop_workers()
        delete_queue(AMQP_URL, dep.queue)

    assert {v.status for v in done.values()} == {Status.SUCCEEDED}
    for job_id in ids:
        # Confirmed messages in a durable queue outlive the restart: none was sent again.
        assert stream_types(dep.store, job_id) == STARTED_ONCE
    assert Counter(dep.side_effect_jobs()) == Counter(ids)  # every job's work ran once
    assert counters.by_status == {"work.succeeded": len(ids)}


# --- 5. broker down when jobs are submitted ---------------------------------------------------


@pytest.mark.parametrize("deployment", deployments("rabbitmq/postgres"), indirect=True)
def test_broker_down_at_submit(deployment: Deployment, caplog: pytest.LogCaptureFixture) -> None:
    """The decision is recorded and answered while the broker is down; the job is published
    once it is back and runs once. Half the jobs go through a process's own outbox (as the
    API's: it tries again until the broker takes them), half through an inline one that left
    them to the reconciler's relay (as a process that died meanwhile would)."""
    require_control("rabbitmqctl")
    dep = deployment
    prepare(dep)
    dep.start_workers(count=1, concurrency=2)
    caplog.set_level(logging.WARNING, logger="ledger.runtime.outbox")
    ledger = Ledger(dep.store)
    own = Outbox(ledger, dep.dispatcher)  # the API's kind: publishes on threads of its own
    try:
        with services_restored():
            first = dep.submit("matrix.read", {"note": "first"})  # the queue's epoch, marked
            rabbit_stop_app()
            began = time.monotonic()
            views = [
                dep.submit("matrix.charge" if i % 2 else "matrix.read", {"note": str(i)})
                for i in range(5)
            ]
            submit_s = (time.monotonic() - began) / len(views)
            request = JobRequest(tool="matrix.read", args={"note": "own"})
            views += [submit(ledger, AGENT, request, own).view for _ in range(5)]
            wait_for(lambda: own.held >= 5, 30, "the outbox to hold what the broker refused")
            rabbit_start_app(AMQP_URL)
            back = time.monotonic()
            # The process's own outbox publishes its jobs itself, no reconciler needed.
            wait_for(lambda: own.held == 0, 30, "the outbox to publish once the broker is back")
            assert own.flush(timeout_s=30)
            print(f"[reliability] 5: published {time.monotonic() - back:.2f}s after the return")
        not_confirmed = [r for r in caplog.records if "not confirmed" in r.getMessage()]
        ids = [v.job_id for v in views]
        # The decision was recorded and answered; the failed hand-off was only logged.
        assert {v.status for v in views} == {Status.QUEUED}
        assert not_confirmed, caplog.text
        print(f"[reliability] 5: a submit with the broker down took {submit_s:.2f}s")
        assert submit_s < 3.0, f"a submit waited {submit_s:.1f}s on the dead broker"
        counters = deployment_verdict(dep, "5 broker down at submit")
    finally:
        own.close()
        dep.stop_workers()
        delete_queue(AMQP_URL, dep.queue)

    done = load_views(dep.store, ids)
    assert {v.status for v in done.values()} == {Status.SUCCEEDED}
    for job_id in ids:
        # Published once the broker was back, by the outbox or the relay: a first dispatch.
        assert stream_types(dep.store, job_id) == STARTED_ONCE
    assert counters.lost == 0 and counters.accepted == len(ids) + 1
    assert Counter(dep.side_effect_jobs()) == Counter([first.job_id, *ids])  # each ran once


# --- 5'. Redis restarted with jobs queued: the broker forgets them ----------------------------


@pytest.mark.parametrize("deployment", deployments("redis/postgres"), indirect=True)
def test_redis_restarted_with_jobs_queued_loses_nothing(
    deployment: Deployment, caplog: pytest.LogCaptureFixture
) -> None:
    require_control("redis-cli", "redis-server")
    dep = deployment
    marks = prepare(dep)
    dep.start_workers(count=1, concurrency=1)
    slow = dep.submit("matrix.charge", {"seconds": 3}).job_id
    wait_for(lambda: len(read_marks(marks)) == 1, 30, "the slow tool to start")
    queued = [
        dep.submit("matrix.charge" if i % 2 else "matrix.read", {"note": str(i)}).job_id
        for i in range(10)
    ]
    caplog.set_level(logging.WARNING, logger="ledger.runtime.outbox")
    with services_restored():
        # This Redis keeps nothing on disk (--save "", no AOF): the queue dies with it, and
        # so does its epoch marker (a key beside it).
        redis_shutdown()
        down = [dep.submit("matrix.read", {"note": f"down {i}"}).job_id for i in range(5)]
        redis_start()
    ids = [slow, *queued, *down]
    refused = [r for r in caplog.records if "not confirmed" in r.getMessage()]
    assert len(refused) == len(down), caplog.text
    counters = deployment_verdict(dep, "5' redis restarted with jobs queued")

    done = load_views(dep.store, ids)
    assert {v.status for v in done.values()} == {Status.SUCCEEDED}
    for job_id in queued:  # confirmed, then wiped with the queue: sent again on that evidence
        again = [
            e.data.get("evidence")
            for e in dep.store.read_stream(f"job-{job_id}")
            if e.type == "job.redispatched"
        ]
        assert again == ["queue_lost"], again
    for job_id in down:  # never confirmed: published by the relay, a first dispatch
        assert stream_types(dep.store, job_id) == STARTED_ONCE
    assert Counter(dep.side_effect_jobs()) == Counter(ids)  # each ran once
    assert counters.lost == 0 and counters.accepted == len(ids)

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
from ledger.codes import Code, Status
from tests.plugins.deployments import (
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
from tests.reliability.checker import fast_policy

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
        assert stream_types(dep.store, job_id) == STARTED_ONCE
    assert Counter(dep.side_effect_jobs()) == Counter(ids)  # every job's work ran once
    assert counters.by_status == {"work.succeeded": len(ids)}


# --- 5. broker down when jobs are submitted ---------------------------------------------------


@pytest.mark.parametrize("deployment", deployments("rabbitmq/postgres"), indirect=True)
def test_broker_down_at_submit(deployment: Deployment, caplog: pytest.LogCaptureFixture) -> None:
    require_control("rabbitmqctl")
    dep = deployment
    prepare(dep)
    dep.start_workers(count=1, concurrency=2)
    caplog.set_level(logging.WARNING, logger="ledger.persistence.submit")
    try:
        with services_restored():
            rabbit_stop_app()
            began = time.monotonic()
            views = [
                dep.submit("matrix.charge" if i % 2 else "matrix.read", {"note": str(i)})
                for i in range(10)
            ]
            submit_s = (time.monotonic() - began) / len(views)
            rabbit_start_app(AMQP_URL)
        not_dispatched = [r for r in caplog.records if "not dispatched" in r.getMessage()]
        ids = [v.job_id for v in views]
        # The decision was recorded and answered; the failed hand-off was only logged.
        assert {v.status for v in views} == {Status.QUEUED}
        assert len(not_dispatched) == len(views), caplog.text
        print(f"[reliability] 5: a submit with the broker down took {submit_s:.2f}s")
        assert submit_s < 3.0, f"a submit waited {submit_s:.1f}s on the dead broker"

        counters = deployment_verdict(
            dep, "5 broker down at submit", policy=fast_policy(max_dispatches=5)
        )
    finally:
        dep.stop_workers()
        delete_queue(AMQP_URL, dep.queue)

    done = load_views(dep.store, ids)
    for job_id, view in done.items():
        types = stream_types(dep.store, job_id)
        assert "job.redispatched" in types, types  # the reconciler, not the submit, delivered it
        ran = view.status is Status.SUCCEEDED
        surfaced = view.error is not None and (view.error.code, view.error.cause) == (
            Code.OUTCOME_MISSING,
            "never_started",
        )
        assert ran or surfaced, view
    assert counters.lost == 0 and counters.accepted == len(ids)
    assert Counter(dep.side_effect_jobs()) <= Counter(ids)


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
    caplog.set_level(logging.WARNING, logger="ledger.persistence.submit")
    with services_restored():
        # This Redis keeps nothing on disk (--save "", no AOF): the queue dies with it.
        redis_shutdown()
        down = [dep.submit("matrix.read", {"note": f"down {i}"}).job_id for i in range(5)]
        redis_start()
    ids = [slow, *queued, *down]
    assert len([r for r in caplog.records if "not dispatched" in r.getMessage()]) == len(down)
    counters = deployment_verdict(
        dep, "5' redis restarted with jobs queued", policy=fast_policy(max_dispatches=8)
    )

    done = load_views(dep.store, ids)
    assert done[slow].status is Status.SUCCEEDED  # it ran through the outage
    for job_id in [*queued, *down]:
        assert "job.redispatched" in stream_types(dep.store, job_id)
        assert done[job_id].status is Status.SUCCEEDED or done[job_id].code == "OUTCOME_MISSING"
    assert Counter(dep.side_effect_jobs()) <= Counter(ids)  # nothing ran twice
    assert counters.lost == 0 and counters.accepted == len(ids)

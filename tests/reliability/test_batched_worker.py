"""The batched worker (workers/batched.py) with real processes: `outcomes worker` on its
default threads pool, RabbitMQ and a Postgres ledger, short leases.

- Killed between its batch's claim commit and the acks: the broker redelivers every message,
  a second worker's claim skips each (the jobs are running), nothing spends twice, and the
  reconciler closes each job worker_lost / verify_at_source.
- A warm shutdown while batched jobs run (`celery inspect active` lists them): they finish,
  their outcomes are recorded and their messages acked before the process exits (nothing is
  left for the broker to redeliver).
- A brake pulled while deliveries wait for a free slot: each later claim is halted.
"""

from __future__ import annotations

import os
import signal
import socket

import pytest

from ledger.codes import Code, Status
from ledger.runtime.ledger import Ledger
from ledger.services import brakes
from tests.integration.test_remote_control import inspect
from tests.plugins.deployments import deployments, stream_types, wait_terminal, wait_until
from tests.plugins.rigs import Rig, load_view, queue_depth
from tests.reliability.test_worker_loss import LOST_SPENDING, assert_worker_lost_spending

RABBITMQ = deployments("rabbitmq/postgres")
SLOW = "rtest.slow_charge"  # spends first (writes its effect), then works for `seconds`


@pytest.mark.parametrize("deployment", RABBITMQ, indirect=True)
def test_killed_between_the_batch_claim_and_the_acks(rig: Rig) -> None:
    dep, store = rig.dep, rig.store
    reconciler = rig.start_reconciler(1.0, dispatch_timeout_s=2.0)
    (worker,) = dep.start_workers(count=1, concurrency=4)
    reconciler.wait_looping()
    jobs = [dep.submit(SLOW, {"seconds": 30}).job_id for _ in range(4)]
    wait_until(lambda: len(rig.effects()) == 4, 30, "all four tools to spend")
    # Claimed and running in the worker process itself (threads), every message unacked.
    assert {e.pid for e in rig.effects()} == {worker.process.pid}
    assert all(load_view(store, j).status is Status.RUNNING for j in jobs)
    assert queue_depth(dep) == 0

    os.killpg(worker.process.pid, signal.SIGKILL)
    worker.process.wait(timeout=10)
    wait_until(lambda: queue_depth(dep) == 4, 30, "the broker to hold the four messages again")
    (second,) = dep.start_workers(count=1, concurrency=4)
    wait_terminal(store, jobs, timeout_s=60)
    wait_until(
        lambda: all(f"job {j}: skipped" in second.log() for j in jobs),
        30,
        "each redelivery to be skipped by the second worker",
    )
    wait_until(lambda: queue_depth(dep) == 0, 30, "the redeliveries to be acked")
    for job_id in jobs:
        assert_worker_lost_spending(rig, job_id)
        assert stream_types(store, job_id) == LOST_SPENDING
    assert sorted(e.job_id for e in rig.effects()) == sorted(jobs)  # each spent exactly once
    reconciler.stop()
    rig.settle_and_check("batched worker killed between claim and ack")


@pytest.mark.parametrize("deployment", RABBITMQ, indirect=True)
def test_a_warm_shutdown_records_and_acks_the_running_batch(rig: Rig) -> None:
    dep, store = rig.dep, rig.store
    (worker,) = dep.start_workers(count=1, concurrency=3)
    # Long enough to outlast `celery inspect`'s own start-up (seconds on a loaded machine):
    # asked after the tools have returned, the worker has no active task left to show.
    jobs = [dep.submit(SLOW, {"seconds": 10}).job_id for _ in range(3)]
    wait_until(lambda: len(rig.effects()) == 3, 30, "all three tools to spend")
    # Celery's own tools see the batched jobs as the worker's active tasks.
    node = f"outcomes-{worker.process.pid}@{socket.gethostname()}"
    active = inspect(dep, "active", [node])[node]
    assert isinstance(active, list)
    assert sorted(task["args"][0] for task in active) == sorted(jobs)
    worker.terminate()  # SIGTERM: Celery's warm shutdown
    assert worker.process.wait(timeout=60) == 0, worker.log()[-3000:]
    for job_id in jobs:  # recorded before the exit, not closed later by a reconciler
        assert load_view(store, job_id).status is Status.SUCCEEDED
        assert stream_types(store, job_id) == ["job.accepted", "work.started", "work.succeeded"]
    assert queue_depth(dep) == 0  # acked: nothing went back to the broker
    rig.settle_and_check("warm shutdown of a batched worker")


@pytest.mark.parametrize("deployment", RABBITMQ, indirect=True)
def test_a_brake_pulled_while_deliveries_wait_halts_each_later_claim(rig: Rig) -> None:
    dep, store = rig.dep, rig.store
    dep.start_workers(count=1, concurrency=2)
    jobs = [dep.submit(SLOW, {"seconds": 2}).job_id for _ in range(6)]
    wait_until(lambda: len(rig.effects()) == 2, 30, "two tools running, four waiting for a slot")
    brakes.pull(Ledger(store), f"tool:{SLOW}", "incident", "ops")
    views = wait_terminal(store, jobs, timeout_s=60)
    started = {e.job_id for e in rig.effects()}
    assert len(started) == 2  # the two claimed before the pull; none after it
    for job_id, view in views.items():
        if job_id in started:
            assert view.status is Status.SUCCEEDED
        else:
            assert view.status is Status.REFUSED
            assert view.error is not None and view.error.code is Code.BRAKE_ENGAGED
            assert stream_types(store, job_id) == ["job.accepted", "work.halted"]
    wait_until(lambda: queue_depth(dep) == 0, 30, "every message acked")
    rig.settle_and_check("brake pulled while batched deliveries wait")

"""Lost and repeated messages with real processes (issue 4; reliability scenario 2).

- the queue deleted (and re-created by a declare) right after accept: its epoch marker is gone,
  so the reconciler re-dispatches the jobs confirmed under it, with that evidence; each job
  runs once when workers come, or, when none ever does, waits for its start deadline and ends
  OUTCOME_MISSING/never_started;
- two real `outcomes reconcile` processes over the same jobs: one event per finding;
- the same message published two and three times, on RabbitMQ and Redis: one work.started, one
  outcome, one side effect.
"""

from __future__ import annotations

import time
import uuid
from collections import Counter

import psycopg
import pytest

from ledger.codes import Code, Status
from ledger.events import TERMINAL_EVENT_TYPES, JobRedispatched
from ledger.queueing import Evidence
from ledger.runtime.ledger import Ledger
from ledger.services.execute import Executor
from ledger.services.work import ClaimResult, claim
from tests.databases import PG_ADMIN_DSN
from tests.plugins.deployments import (
    Deployment,
    count_events,
    deployments,
    stream_types,
    wait_terminal,
    wait_until,
)
from tests.plugins.rigs import Rig, elapsed_since, load_view, queue_depth, reconcile_until
from tests.reliability.checker import fast_policy, settle
from workers.app import EXECUTE_TASK

RABBITMQ = deployments("rabbitmq/postgres")
DISPATCH_TIMEOUT_S = 0.5  # the reconciler processes' OUTCOMES_DISPATCH_TIMEOUT_S (the relay's)
START_WITHIN_S = 3.0  # the jobs' own start deadline, where a scenario lets them expire
REJECTED_START_WITHIN_S = 10.0  # past the rejection's backoff, with room to spare
# Every event that carries a worker's outcome (a late one included): one per job, at most.
OUTCOMES = (*TERMINAL_EVENT_TYPES, "work.late_outcome")
NEVER_STARTED = ["job.accepted", "job.outcome_missing"]


def delete_queue(dep: Deployment) -> int:
    """What an operator's `rabbitmqctl delete_queue` does: the queue and its messages go."""
    with dep.app.connection_for_write() as conn:
        return int(conn.default_channel.queue_delete(dep.queue) or 0)


def redispatches(dep: Deployment, job_id: str) -> list[JobRedispatched]:
    found = []
    for event in dep.store.read_stream(f"job-{job_id}"):
        if isinstance(event.payload, JobRedispatched):
            found.append(event.payload)
    return found


# --- the queue deleted right after accept ------------------------------------------------------


@pytest.mark.parametrize("workers_come", [True, False], ids=["workers_later", "no_workers_ever"])
@pytest.mark.parametrize("deployment", RABBITMQ, indirect=True)
def test_a_deleted_queue_is_evidence_and_its_jobs_are_sent_again(
    rig: Rig, workers_come: bool
) -> None:
    """Accepted with no worker running, confirmed by the broker, then the queue is deleted with
    its messages: the queue's epoch marker (a binding) went with it, so the reconciler sends
    each job again, recording that evidence. Nothing ran, so that is safe; once a worker
    starts each job runs once. With no worker ever, each waits, told as late, for its start
    deadline and ends OUTCOME_MISSING/never_started. Never queued forever, never lost."""
    dep, store = rig.dep, rig.store
    deadline = None if workers_come else START_WITHIN_S
    views = [
        dep.submit("rtest.slow_charge", {"amount": i}, start_within_s=deadline) for i in range(5)
    ]
    ids = [v.job_id for v in views]
    assert {v.status for v in views} == {Status.QUEUED}
    wait_until(lambda: queue_depth(dep) == len(ids), 30, "the accepted jobs to be queued")
    policy = fast_policy()
    assert settle(store, dep.dispatcher, policy, timeout_s=0.1) == 0  # confirmed: trusted
    assert delete_queue(dep) == len(ids)
    started_at = time.monotonic()
    reconcile_until(
        store,
        dep.dispatcher,
        policy,
        lambda: count_events(store, "job.redispatched") == len(ids),
        30,
        "the reconciler to send every job of the deleted queue again",
    )
    for job_id in ids:
        (again,) = redispatches(dep, job_id)
        assert again.evidence == Evidence.QUEUE_LOST.value, again
        assert "lost its marker" in again.reason
    # Really handed to the broker again: the marker's declare made the queue anew.
    wait_until(lambda: queue_depth(dep) == len(ids), 30, "the re-dispatched messages")
    if workers_come:
        dep.start_workers(count=1, concurrency=2)
        done = wait_terminal(store, ids, timeout_s=30)
        assert {v.status for v in done.values()} == {Status.SUCCEEDED}
        for job_id in ids:
            assert stream_types(store, job_id) == [
                "job.accepted",
                "job.redispatched",
                "work.started",
                "work.succeeded",
            ]
        assert sorted(dep.side_effect_jobs()) == sorted(ids)
    else:
        settle(store, dep.dispatcher, policy, timeout_s=30)
        for job_id in ids:
            view = load_view(store, job_id)
            assert view.status is Status.FAILED and view.error is not None, view
            assert (view.error.code, view.error.cause) == (Code.OUTCOME_MISSING, "never_started")
            assert "nothing ran" in view.error.message
            assert (view.dispatches, view.attempts) == (2, 0)
            assert stream_types(store, job_id) == [
                "job.accepted",
                "job.redispatched",
                "job.outcome_missing",
            ]
        assert dep.side_effect_jobs() == []
    print(f"[timing] queue deleted -> all terminal in {elapsed_since(started_at):.2f}s")
    rig.settle_and_check(
        f"queue deleted after accept ({'workers later' if workers_come else 'no workers'})"
    )


# --- two reconcilers at once -----------------------------------------------------------------


@pytest.mark.parametrize("deployment", RABBITMQ, indirect=True)
def test_two_reconciler_processes_record_each_finding_once(rig: Rig) -> None:
    """Two `outcomes reconcile --interval 0.2` processes, both looping before anything is due,
    race over jobs nobody published (their relays publish them, no event), jobs a worker could
    not take (re-dispatched on that evidence), jobs whose worker vanished (a claim whose lease
    ran out) and, past the jobs' start deadline, the closing of every one that never started.
    Every job's stream is exactly its findings, each once."""
    dep, store = rig.dep, rig.store
    first = rig.start_reconciler(0.2, dispatch_timeout_s=DISPATCH_TIMEOUT_S)
    second = rig.start_reconciler(0.2, dispatch_timeout_s=DISPATCH_TIMEOUT_S)
    first.wait_looping()
    second.wait_looping()
    worker = Executor(Ledger(store), "test-worker")

    def vanished(tool: str) -> str:
        """Accepted and claimed at once, then silent."""
        job_id = dep.submit(tool, {}, dispatch=False, start_within_s=START_WITHIN_S).job_id
        assert claim(Ledger(store), job_id, "vanished-worker", 0.2).result is ClaimResult.CLAIMED
        return job_id

    def decided(published: bool, start_within_s: float = START_WITHIN_S) -> str:
        tool = "rtest.slow_charge"
        return dep.submit(tool, {}, dispatch=published, start_within_s=start_within_s).job_id

    queued = [decided(published=False) for _ in range(40)]
    # Confirmed, then rejected: re-sent after the rejection's backoff (2 s), so their deadline
    # leaves the reconcilers time for it on a loaded machine (3 s did not, in CI).
    rejected = [decided(published=True, start_within_s=REJECTED_START_WITHIN_S) for _ in range(20)]
    for job_id in rejected:
        worker.report_rejected(job_id, RuntimeError("the claim failed"))
    lost_spending = [vanished("rtest.slow_charge") for _ in range(30)]
    lost_retryable = [vanished("rtest.poison") for _ in range(30)]
    every = queued + rejected + lost_spending + lost_retryable
    wait_terminal(store, every, timeout_s=60)
    findings = len(queued) + len(rejected) * 2 + len(lost_spending) + len(lost_retryable) * 2

    def reported() -> int:
        return sum(len(p["recorded"]) for p in first.passes() + second.passes())

    # The pass that recorded the last finding goes on (its re-dispatches, the relay) before it
    # prints its line; a stop in between (SIGINT) would lose that line, not the findings.
    wait_until(lambda: reported() >= findings, 30, "every recording pass to report")
    first.stop()
    second.stop()

    expected = {
        **{job_id: NEVER_STARTED for job_id in queued},
        **{
            job_id: ["job.accepted", "job.redispatched", "job.outcome_missing"]
            for job_id in rejected
        },
        **{
            job_id: ["job.accepted", "work.started", "job.outcome_missing"]
            for job_id in lost_spending
        },
        **{
            job_id: ["job.accepted", "work.started", "work.retry_scheduled", NEVER_STARTED[1]]
            for job_id in lost_retryable
        },
    }
    assert {job_id: stream_types(store, job_id) for job_id in every} == expected
    for job_id in rejected:
        assert [r.evidence for r in redispatches(dep, job_id)] == [Evidence.WORKER_REJECTED.value]
    errors = [load_view(store, job_id).error for job_id in every]
    causes = Counter(error.cause for error in errors if error is not None)
    assert causes == {"never_started": 90, "worker_lost": 30}, causes
    # Nobody published `queued`: the relays did, as first dispatches (no event, confirmed).
    passes = first.passes() + second.passes()
    assert sum(int(p["relayed"]) for p in passes) >= len(queued)

    # What the processes say they recorded is exactly what the ledger holds, once each.
    by_reconciler = [e for e in store.iter_events() if e.actor == "reconciler"]
    assert len(by_reconciler) == findings
    assert sum(len(p["recorded"]) for p in passes) == findings
    by_process = [sum(len(p["recorded"]) for p in r.passes()) for r in (first, second)]
    lost_races = sum(int(p["lost_races"]) for p in passes)
    print(
        f"[reconcilers] findings={findings} recorded_by_process={by_process} "
        f"lost_races={lost_races}"
    )
    rig.settle_and_check("two reconciler processes at once")


@pytest.mark.parametrize("deployment", RABBITMQ, indirect=True)
def test_the_reconciler_process_survives_a_database_blip(rig: Rig) -> None:
    """Every connection of the ledger's database is cut (a failover, a Postgres restart): the
    reconciler process keeps looping and records the next finding."""
    dep, store = rig.dep, rig.store
    reconciler = rig.start_reconciler(0.2, dispatch_timeout_s=DISPATCH_TIMEOUT_S)
    reconciler.wait_looping()
    cut_every_connection(dep.database_url)
    store.close()  # this process's pooled connections were cut too
    job = dep.submit("rtest.slow_charge", {}, dispatch=False, start_within_s=1)

    def closed_or_exited() -> bool:
        return reconciler.process.poll() is not None or load_view(store, job.job_id).terminal

    wait_until(closed_or_exited, 30, "the reconciler to close the job past its deadline")
    assert reconciler.process.poll() is None, reconciler.errors()
    assert stream_types(store, job.job_id) == NEVER_STARTED
    reconciler.stop()
    rig.settle_and_check("reconciler process across a database blip")


def cut_every_connection(database_url: str) -> None:
    dbname = database_url.rsplit("/", 1)[1]
    with psycopg.connect(PG_ADMIN_DSN, autocommit=True) as conn:
        conn.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE datname = %s AND pid <> pg_backend_pid()",
            (dbname,),
        )


# --- the same message published several times ------------------------------------------------


@pytest.mark.parametrize(
    "deployment", deployments("rabbitmq/postgres", "redis/postgres"), indirect=True
)
def test_the_same_message_published_two_and_three_times(rig: Rig) -> None:
    """Copies of one message (same task id) race in different pool processes: the claim lets
    exactly one run the tool. Two copies wait before the workers start; the third copy of the
    second group is published while the workers are already consuming."""
    dep, store = rig.dep, rig.store
    twice = [dep.submit("rtest.slow_charge", {"seconds": 0.3}, dispatch=False) for _ in range(10)]
    thrice = [dep.submit("rtest.slow_charge", {"seconds": 0.3}, dispatch=False) for _ in range(10)]
    copies = {v.job_id: 2 for v in twice} | {v.job_id: 3 for v in thrice}
    task_ids = {job_id: str(uuid.uuid4()) for job_id in copies}

    def publish(job_id: str) -> None:
        dep.app.send_task(EXECUTE_TASK, args=[job_id], queue=dep.queue, task_id=task_ids[job_id])

    for job_id in copies:
        publish(job_id)
        publish(job_id)
    dep.start_workers(count=2, concurrency=3)
    for view in thrice:
        publish(view.job_id)

    done = wait_terminal(store, list(copies), timeout_s=60)

    def handled(job_id: str) -> int:
        return dep.worker_logs().count(f"Task {EXECUTE_TASK}[{task_ids[job_id]}] succeeded")

    wait_until(
        lambda: all(handled(j) == n for j, n in copies.items()),
        60,
        "every copy to be delivered and handled",
    )
    assert {v.status for v in done.values()} == {Status.SUCCEEDED}
    for job_id in copies:
        types = Counter(stream_types(store, job_id))
        assert types["work.started"] == 1, types
        assert sum(types[t] for t in OUTCOMES) == 1, types
    assert Counter(dep.side_effect_jobs()) == Counter(list(copies))
    skipped = dep.worker_logs().count(": skipped")
    assert skipped == sum(copies.values()) - len(copies), skipped
    print(f"[redelivery] {dep.broker}: {sum(copies.values())} deliveries, {skipped} skipped")
    rig.settle_and_check(f"same message published 2 and 3 times ({dep.broker})")

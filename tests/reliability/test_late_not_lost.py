"""Late is not lost (issue 24): a job merely waiting for a worker runs, once, when one gets to
it; only the caller's own start deadline closes it; what no broker confirmed is published by
the outbox or the reconciler's relay; a backlog that cannot start a job in time refuses it.

Real `outcomes worker` and `outcomes reconcile` processes, on RabbitMQ and on the embedded
broker. Scenarios that stop a shared service (the broker down at submit, RabbitMQ restarted
with a durable queue) are in test_matrix_brokers.py, which runs alone.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

import httpx
import pytest

from ledger.codes import Code, NextAction, Status
from ledger.decisions import JobRequest
from ledger.runtime.ledger import Ledger
from ledger.runtime.outbox import Outbox
from ledger.services import jobs, tokens
from ledger.services.submit import submit
from tests.plugins.deployments import (
    AGENT,
    OUTCOMES,
    Deployment,
    count_events,
    deployments,
    load_views,
    stream_types,
    wait_terminal,
    wait_until,
)
from tests.plugins.rigs import Rig, load_view, reconcile_until
from tests.reliability.checker import fast_policy, settle

BOTH = deployments("rabbitmq/postgres", "embedded/sqlite")
STARTED_ONCE = ["job.accepted", "work.started", "work.succeeded"]
# How long every worker stays away in `make test`. The reconciler runs every 0.2 s and its
# relay every pass with a 0.5 s delay: as many passes and relay rounds as several minutes at
# the defaults, and far past the old timer, which closed a job after three dispatch deadlines.
# `make soak` also runs three real minutes at the defaults.
STOPPED_S = float(os.environ.get("MATRIX_STOPPED_S", "15"))


def waiting_of(dep: Deployment, job_id: str) -> tuple[NextAction, dict[str, object] | None]:
    ledger = Ledger(dep.store)
    view = jobs.get(ledger, job_id)
    told = jobs.waiting_of(ledger, view)
    return view.next_action, told.model_dump(mode="json") if told else None


def findings_about(dep: Deployment, job_ids: list[str]) -> list[str]:
    wanted = {f"job-{job_id}" for job_id in job_ids}
    return [
        e.type for e in dep.store.iter_events() if e.stream_id in wanted and e.actor == "reconciler"
    ]


# --- every worker stopped ---------------------------------------------------------------------


@pytest.mark.parametrize("deployment", BOTH, indirect=True)
def test_every_worker_stopped_the_jobs_wait_told_as_late_and_each_runs_once(rig: Rig) -> None:
    workers_stopped(rig, STOPPED_S, interval_s=0.2, relay_after_s=0.5)


@pytest.mark.soak
@pytest.mark.parametrize("deployment", deployments("rabbitmq/postgres"), indirect=True)
def test_every_worker_stopped_for_three_minutes_with_the_default_reconciler(rig: Rig) -> None:
    """The same for real minutes, with `outcomes reconcile`'s defaults (a pass every 5 s, the
    relay's 5 s): the old timer closed such jobs after 90 s."""
    workers_stopped(rig, 180.0, interval_s=5.0, relay_after_s=5.0)


def workers_stopped(rig: Rig, stopped_s: float, interval_s: float, relay_after_s: float) -> None:
    dep = rig.dep
    dep.start_workers(count=2, concurrency=2)
    warm = dep.submit("matrix.read", {"note": "warm"}).job_id
    wait_terminal(dep.store, [warm], timeout_s=30)
    dep.stop_workers()  # a slow deploy, a crash loop: no worker consumes
    reconciler = rig.start_reconciler(interval_s, dispatch_timeout_s=relay_after_s)
    reconciler.wait_looping(timeout_s=60 + 3 * interval_s)
    ids = [dep.submit("matrix.read", {"note": str(i)}).job_id for i in range(6)]
    began = time.monotonic()
    wait_until(lambda: time.monotonic() - began >= stopped_s, stopped_s + 5, "the outage")
    assert len(reconciler.passes()) >= stopped_s / interval_s / 2  # it kept judging all along
    # Nothing closed them, nothing sent them again: their confirmed messages are trusted.
    assert findings_about(dep, ids) == []
    for job_id in ids:
        action, told = waiting_of(dep, job_id)
        assert action is NextAction.WAIT
        assert told is not None and told["dispatch"] == "confirmed", told
        assert float(str(told["seconds"])) >= stopped_s and told["dispatches"] == 1
    print(f"[late] {len(ids)} jobs waited {stopped_s:.0f}s with no worker: none closed or resent")
    dep.start_workers(count=2, concurrency=2)
    done = wait_terminal(dep.store, ids, timeout_s=60)
    reconciler.stop()
    assert {v.status for v in done.values()} == {Status.SUCCEEDED}
    for job_id in ids:
        assert stream_types(dep.store, job_id) == STARTED_ONCE
    assert count_events(dep.store, "job.redispatched") == 0
    rig.settle_and_check(f"every worker stopped {stopped_s:.0f}s ({dep.broker})")


# --- the start deadline -----------------------------------------------------------------------


@pytest.mark.parametrize("deployment", BOTH, indirect=True)
def test_a_start_deadline_passing_closes_the_job_and_nothing_runs_it(rig: Rig) -> None:
    dep = rig.dep
    late = dep.submit("matrix.charge", {"note": "late"}, start_within_s=2).job_id
    patient = dep.submit("matrix.charge", {"note": "patient"}).job_id  # the tool's 600 s
    policy = fast_policy()
    reconcile_until(
        dep.store,
        dep.dispatcher,
        policy,
        lambda: load_view(dep.store, late).terminal,
        30,
        "the start deadline to pass",
    )
    view = load_view(dep.store, late)
    assert view.error is not None
    assert (view.status, view.error.code, view.error.cause) == (
        Status.FAILED,
        Code.OUTCOME_MISSING,
        "never_started",
    )
    assert "its message was confirmed" in str(dep.store.read_stream(f"job-{late}")[-1].data)
    assert load_view(dep.store, patient).status is Status.QUEUED
    dep.start_workers(count=1, concurrency=2)  # the late job's message is still queued
    wait_terminal(dep.store, [patient], timeout_s=30)
    wait_until(lambda: f"job {late}: skipped" in dep.worker_logs(), 30, "its delivery skipped")
    assert stream_types(dep.store, late) == ["job.accepted", "job.outcome_missing"]
    assert dep.side_effect_jobs() == [patient]  # the closed job never ran
    rig.settle_and_check(f"start deadline passed ({dep.broker})")


# --- the backlog ------------------------------------------------------------------------------


@pytest.mark.parametrize("deployment", BOTH, indirect=True)
def test_a_backlog_deeper_than_the_deadline_is_refused_at_submit(rig: Rig) -> None:
    """One slot, half-second jobs: about two start a second. With a backlog of twenty, a job
    that must start within three seconds cannot: it is refused now, naming the backlog and
    when to come back, and recorded like every refusal; one that may wait is accepted."""
    dep = rig.dep
    ledger = Ledger(dep.store)
    outbox = Outbox(ledger, dep.dispatcher)  # the API's kind: it samples the backlog
    dep.start_workers(count=1, concurrency=1)
    try:
        for i in range(20):
            submit(
                ledger, AGENT, JobRequest("matrix.read", {"seconds": 0.5, "note": str(i)}), outbox
            )

        def measured() -> bool:
            backlog = outbox.backlog.current()
            return backlog.starts_per_s is not None and backlog.waiting >= 8

        wait_until(measured, 30, "the drain rate to be measured under the backlog")
        hurried = JobRequest("matrix.read", {"note": "hurried"}, start_within_s=3)
        refused = submit(ledger, AGENT, hurried, outbox).view
        patient = submit(ledger, AGENT, JobRequest("matrix.read", {"note": "patient"}), outbox).view
    finally:
        outbox.close()
    backlog = outbox.backlog.current()
    print(f"[backlog] {backlog.waiting} waiting, {backlog.starts_per_s} starts/s")
    assert refused.status is Status.REFUSED and refused.error is not None
    error = refused.error
    assert (error.code, error.cause, error.dependency) == (Code.QUOTA_EXCEEDED, "backlog", "queue")
    assert error.retry_after_s is not None and error.retry_after_s >= 1
    assert "start deadline of 3 s" in error.message and "nothing was queued" in error.message
    assert stream_types(dep.store, refused.job_id) == ["job.refused"]
    assert patient.status is Status.QUEUED
    wait_terminal(dep.store, [patient.job_id], timeout_s=60)
    rig.settle_and_check(f"backlog refused at submit ({dep.broker})")


# --- the queue lost ---------------------------------------------------------------------------


@pytest.mark.parametrize("deployment", deployments("embedded/sqlite"), indirect=True)
def test_the_embedded_queue_wiped_is_evidence_and_each_job_runs_once(rig: Rig) -> None:
    """The embedded broker's folder emptied (its messages and its epoch marker gone, as when
    someone clears `.outcomes/broker`): the reconciler sends each job again with that
    evidence, and each runs once. (RabbitMQ's deleted queue: test_redelivery.py.)"""
    dep = rig.dep
    ids = [dep.submit("matrix.read", {"note": str(i)}).job_id for i in range(4)]
    folder = dep.home / ".outcomes" / "broker" / "queue"
    assert (folder / f".epoch.{dep.queue}").exists()
    for path in folder.iterdir():
        path.unlink()
    policy = fast_policy()
    reconcile_until(
        dep.store,
        dep.dispatcher,
        policy,
        lambda: count_events(dep.store, "job.redispatched") == len(ids),
        30,
        "every job of the wiped queue to be sent again",
    )
    for job_id in ids:
        kinds = [
            e.data.get("evidence")
            for e in dep.store.read_stream(f"job-{job_id}")
            if e.type == "job.redispatched"
        ]
        assert kinds == ["queue_lost"]
    dep.start_workers(count=1, concurrency=2)
    done = wait_terminal(dep.store, ids, timeout_s=30)
    assert {v.status for v in done.values()} == {Status.SUCCEEDED}
    assert sorted(dep.side_effect_jobs()) == sorted(ids)
    rig.settle_and_check("embedded queue wiped")


@pytest.mark.parametrize("deployment", deployments("embedded/sqlite"), indirect=True)
def test_the_embedded_broker_away_at_submit_then_back(rig: Rig) -> None:
    """The embedded broker's folder is gone for a while (a disk unmounted, a folder moved): a
    submit records the decision and answers; the process's outbox publishes the job once the
    folder is back, and it runs once."""
    dep = rig.dep
    ledger = Ledger(dep.store)
    dep.submit("matrix.read", {"note": "first"})  # the queue exists, with its epoch marker
    folder = dep.home / ".outcomes" / "broker" / "queue"
    aside = folder.with_name("queue-away")
    outbox = Outbox(ledger, dep.dispatcher)
    try:
        folder.rename(aside)
        views = [
            submit(ledger, AGENT, JobRequest("matrix.read", {"note": str(i)}), outbox).view
            for i in range(3)
        ]
        wait_until(lambda: outbox.held == 3, 30, "the outbox to hold what it could not write")
        with dep.store.reading() as reads:
            assert all(reads.dispatch_state(v.job_id) is None for v in views)
        aside.rename(folder)
        wait_until(lambda: outbox.held == 0, 30, "the outbox to publish once the folder is back")
        assert outbox.flush(timeout_s=10)
    finally:
        outbox.close()
        if aside.exists() and not folder.exists():
            aside.rename(folder)
    dep.start_workers(count=1, concurrency=2)
    ids = [v.job_id for v in views]
    done = wait_terminal(dep.store, ids, timeout_s=30)
    assert {v.status for v in done.values()} == {Status.SUCCEEDED}
    for job_id in ids:
        assert stream_types(dep.store, job_id) == STARTED_ONCE
    rig.settle_and_check("embedded broker away at submit")


# --- the API killed between its commit and its publish -----------------------------------------


@contextmanager
def blackhole() -> Iterator[int]:
    """A port that takes connections and never answers: a broker hung mid-handshake."""
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(64)
        yield int(server.getsockname()[1])


@pytest.mark.parametrize("deployment", deployments("rabbitmq/postgres"), indirect=True)
def test_the_api_killed_between_commit_and_publish_is_relayed(rig: Rig, tmp_path: Path) -> None:
    """A real `outcomes serve --api-only` whose broker hangs: the POST is answered 202 (the
    decision is committed; publishing is the outbox's, after the answer), then the process is
    killed with `kill -9` before any publish went out. The reconciler's relay publishes the
    job, and it runs once."""
    dep = rig.dep
    issued = tokens.create(Ledger(dep.store), "acme", "agent", None, actor="tests")
    with blackhole() as hung:
        port = _free_port()
        env = dict(dep.env)
        env["OUTCOMES_BROKER_URL"] = f"amqp://guest:guest@127.0.0.1:{hung}//"
        api = subprocess.Popen(
            [str(OUTCOMES), "serve", "--api-only", "--port", str(port)],
            cwd=dep.home,
            env=env,
            stdout=(tmp_path / "api.log").open("wb"),
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            base = f"http://127.0.0.1:{port}"
            wait_until(lambda: _healthy(base, api), 60, "the API to answer")
            answered = httpx.post(
                f"{base}/v1/jobs",
                json={"tool": "matrix.read", "args": {"note": "orphan"}},
                headers={"Authorization": f"Bearer {issued.token}"},
                timeout=30,
            )
            assert answered.status_code == 202, answered.text
            job_id = answered.json()["job_id"]
        finally:
            with suppress(ProcessLookupError):
                os.killpg(api.pid, signal.SIGKILL)  # kill -9, mid-handshake with the broker
            api.wait(timeout=30)
    with dep.store.reading() as reads:
        assert reads.dispatch_state(job_id) is None  # committed, never published
    assert load_view(dep.store, job_id).status is Status.QUEUED
    policy = fast_policy(relay_after_s=0.5)
    reconcile_until(
        dep.store,
        dep.dispatcher,
        policy,
        lambda: _confirmed(dep, job_id),
        30,
        "the reconciler's relay to publish the orphaned job",
    )
    dep.start_workers(count=1, concurrency=2)
    wait_terminal(dep.store, [job_id], timeout_s=30)
    assert stream_types(dep.store, job_id) == STARTED_ONCE
    assert dep.side_effect_jobs() == [job_id]
    settle(dep.store, dep.dispatcher, policy, timeout_s=10)
    assert load_views(dep.store, [job_id])[job_id].status is Status.SUCCEEDED
    rig.settle_and_check("api killed between commit and publish")


def _confirmed(dep: Deployment, job_id: str) -> bool:
    with dep.store.reading() as reads:
        return reads.dispatch_state(job_id) is not None


def _healthy(base: str, process: subprocess.Popen[bytes]) -> bool:
    if process.poll() is not None:
        pytest.fail(f"the API exited with {process.returncode}")
    try:
        return httpx.get(f"{base}/healthz", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])

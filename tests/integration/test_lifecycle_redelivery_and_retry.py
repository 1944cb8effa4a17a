"""Redelivered messages and the retry policy end to end, with real Celery worker processes.

A message delivered twice before any worker runs, and once more after the job finished, runs
the tool once (one start, one terminal event, one effect). Retries follow the policy: a
spending tool is never retried; a failure whose fingerprint changes is retried with growing
backoff up to max_attempts; the same fingerprint twice stops retrying.
"""

from __future__ import annotations

import uuid
from collections import Counter
from datetime import timedelta

import pytest

from ledger.codes import Code, Status
from ledger.events import WorkRetryScheduled, job_stream
from tests.plugins.deployments import (
    ON_EVERY_BROKER,
    Deployment,
    load_views,
    wait_terminal,
    wait_until,
)
from workers.app import EXECUTE_TASK

TERMINAL_WORK = ("work.succeeded", "work.declined", "work.partial", "work.failed", "work.halted")


# --- a redelivered message --------------------------------------------------------------------


@pytest.mark.parametrize("deployment", ON_EVERY_BROKER, indirect=True)
def test_a_message_delivered_twice_runs_the_tool_once(deployment: Deployment) -> None:
    store = deployment.store
    job = deployment.submit("seo.keyword_sweep", {"keywords": ["shoes"]}, dispatch=False)
    task_id = str(uuid.uuid4())

    def deliver() -> None:
        deployment.app.send_task(
            EXECUTE_TASK, args=[job.job_id], queue=deployment.queue, task_id=task_id
        )

    def deliveries() -> int:
        return deployment.worker_logs().count(f"Task {EXECUTE_TASK}[{task_id}] succeeded")

    deliver()
    deliver()  # the same message twice, both waiting before any worker runs
    deployment.start_workers(count=2)
    wait_terminal(store, [job.job_id])
    wait_until(lambda: deliveries() == 2, 60, "both deliveries to be handled")
    deliver()  # and once more after the job has finished
    wait_until(lambda: deliveries() == 3, 60, "the late delivery to be handled")

    stream = store.read_stream(job_stream(job.job_id))
    types = Counter(e.type for e in stream)
    assert types["work.started"] == 1, types
    assert sum(types[t] for t in TERMINAL_WORK) == 1, types
    assert load_views(store, [job.job_id])[job.job_id].status is Status.SUCCEEDED
    assert deployment.side_effect_jobs() == [job.job_id]


# --- the retry policy -------------------------------------------------------------------------


@pytest.mark.parametrize("deployment", ON_EVERY_BROKER, indirect=True)
def test_retry_policy(deployment: Deployment) -> None:
    store = deployment.store
    deployment.start_workers(count=1)
    spending = deployment.submit("itest.charge_flaky", {})
    changing = deployment.submit("itest.flaky_changing", {})
    repeating = deployment.submit("itest.flaky_same", {})
    ids = [spending.job_id, changing.job_id, repeating.job_id]
    done = wait_terminal(store, ids, timeout_s=60)

    assert {done[i].status for i in ids} == {Status.FAILED}
    assert {done[i].code for i in ids} == {Code.SOURCE_UNRELIABLE}
    calls = Counter(deployment.side_effect_jobs())
    # A spending tool is never retried, whatever its failure says.
    assert (done[spending.job_id].attempts, calls[spending.job_id]) == (1, 1)
    assert done[spending.job_id].error is not None and done[spending.job_id].error.retryable
    # A fingerprint that changes each time: retried with backoff up to max_attempts (3).
    assert (done[changing.job_id].attempts, calls[changing.job_id]) == (3, 3)
    # The same fingerprint twice: nothing changed, so retrying stops after the 2nd attempt.
    assert (done[repeating.job_id].attempts, calls[repeating.job_id]) == (2, 2)

    for job_id, retries in [(spending.job_id, 0), (changing.job_id, 2), (repeating.job_id, 1)]:
        stream = store.read_stream(job_stream(job_id))
        scheduled = [e for e in stream if e.type == "work.retry_scheduled"]
        assert len(scheduled) == retries
        assert sum(e.type == "work.started" for e in stream) == retries + 1
        waits = []
        for event in scheduled:
            payload = event.payload
            assert isinstance(payload, WorkRetryScheduled)
            waits.append(payload.due_at - event.recorded_at)
            (next_start,) = [
                e
                for e in stream
                if e.type == "work.started" and e.data["attempt"] == payload.attempt + 1
            ]
            # The next attempt waited for the backoff (a little slack for the ETA timer).
            assert next_start.recorded_at >= payload.due_at - timedelta(milliseconds=50)
        assert waits == sorted(waits) and len(set(waits)) == len(waits), waits
        assert all(w > timedelta(seconds=0.5) for w in waits), waits  # backoff_s(1) is 1 s

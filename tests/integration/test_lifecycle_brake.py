"""The emergency brake end to end, with real Celery worker processes (issue 3).

A brake pulled while 200 jobs are queued halts every one of them before any work starts, and
jobs submitted after its release run; a brake pulled while jobs are streaming in lets no work
start after the pull commits: what started before it succeeds, everything else is refused
with BRAKE_ENGAGED naming the brake.
"""

from __future__ import annotations

import threading
from collections import Counter
from concurrent.futures import ThreadPoolExecutor

import pytest

from ledger.codes import Code, Status
from ledger.job_view import JobView, envelope
from ledger.runtime.ledger import Ledger
from ledger.services.brakes import pull, release
from tests.factories import ERROR_KEYS
from tests.plugins.deployments import (
    ON_EVERY_BROKER,
    Deployment,
    count_events,
    deployments,
    events_of_type,
    wait_terminal,
    wait_until,
)


@pytest.mark.parametrize("deployment", ON_EVERY_BROKER, indirect=True)
def test_brake_pulled_while_200_jobs_are_queued(deployment: Deployment) -> None:
    store = deployment.store
    with ThreadPoolExecutor(8) as pool:
        queued = list(
            pool.map(lambda i: deployment.submit("itest.charge", {"amount": i}), range(200))
        )
    assert {v.status for v in queued} == {Status.QUEUED}
    brake = pull(Ledger(store), "global", "runaway spend", "ops")

    deployment.start_workers(count=2)
    done = wait_terminal(store, [v.job_id for v in queued], timeout_s=120)

    for view in done.values():
        body = envelope(view).model_dump(mode="json")
        assert (body["status"], body["attempts"]) == ("refused", 0), body
        assert body["next_action"] == "satisfy_precondition", body
        assert set(body["error"]) == ERROR_KEYS, body
        assert body["error"]["code"] == "BRAKE_ENGAGED", body
        assert body["error"]["cause"] == brake.brake_id, body
    assert deployment.side_effect_jobs() == []
    assert count_events(store, "work.started") == 0
    assert count_events(store, "work.halted") == 200

    release(Ledger(store), brake.brake_id, "spend understood", "ops")
    fresh = [deployment.submit("itest.charge", {"amount": i}) for i in range(5)]
    after = wait_terminal(store, [v.job_id for v in fresh])
    assert {v.status for v in after.values()} == {Status.SUCCEEDED}
    assert sorted(deployment.side_effect_jobs()) == sorted(v.job_id for v in fresh)


@pytest.mark.parametrize(
    "deployment", deployments("rabbitmq/postgres", "embedded/sqlite"), indirect=True
)
def test_no_work_starts_after_the_pull_commits(deployment: Deployment) -> None:
    store = deployment.store
    deployment.start_workers(count=2)
    submitted: list[JobView] = []
    errors: list[BaseException] = []

    def stream() -> None:
        try:
            for i in range(150):
                submitted.append(deployment.submit("itest.charge", {"amount": i, "delay_s": 0.5}))
        except BaseException as exc:
            errors.append(exc)

    submitter = threading.Thread(target=stream, name="submitter")
    submitter.start()
    try:
        # Pulled once work runs and jobs wait behind it (the race this test is about): on a
        # loaded machine the submits alone may be slower than four slots of 0.5 s jobs.
        wait_until(
            lambda: (
                count_events(store, "work.started") >= 8
                and count_events(store, "job.accepted") - count_events(store, "work.started") >= 4
            ),
            60,
            "8 jobs started and 4 waiting",
        )
        brake = pull(Ledger(store), "global", "stop everything", "ops")
    finally:
        submitter.join(timeout=120)
    assert not submitter.is_alive() and errors == [] and len(submitted) == 150

    done = wait_terminal(store, [v.job_id for v in submitted], timeout_s=120)
    (pulled,) = events_of_type(store, "brake.pulled")
    started = {
        e.stream_id.removeprefix("job-"): e.position for e in events_of_type(store, "work.started")
    }
    late = {job: pos for job, pos in started.items() if pos > pulled.position}
    assert late == {}, f"work started after the brake committed at {pulled.position}: {late}"

    halted = count_events(store, "work.halted")
    assert started and halted > 0, "the race did not happen: nothing was queued at the pull"
    for job_id, view in done.items():
        if job_id in started:
            assert view.status is Status.SUCCEEDED, view
        else:
            assert view.status is Status.REFUSED and view.error is not None, view
            assert (view.error.code, view.error.cause) == (Code.BRAKE_ENGAGED, brake.brake_id)
    assert Counter(deployment.side_effect_jobs()) == Counter(list(started))

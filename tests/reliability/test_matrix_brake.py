"""Reliability matrix, the emergency brake (scenario 7): pulled with jobs queued, pulled during
long multi-step work, brake state unreadable (fail closed), pulled then every worker restarted.

The promise (contract §5): no work starts after a pull has committed, and if the brake state
cannot be read, no work starts at all.
"""

from __future__ import annotations

import json
import subprocess
import threading
import time
from collections import Counter
from pathlib import Path

import pytest

import tests.tools  # noqa: F401  (the test process submits to these tools)
from ledger.brake_view import BrakeView
from ledger.codes import Code, Status
from ledger.decisions import JobRequest
from ledger.job_view import JobView, envelope
from ledger.persistence.sql_store import SqlStore
from ledger.runtime.ledger import Ledger
from ledger.services.brakes import active as list_active
from ledger.services.brakes import pull, release
from ledger.services.execute import Executor
from ledger.services.submit import submit
from tests.factories import open_sql
from tests.plugins.deployments import (
    AGENT,
    OUTCOMES,
    Deployment,
    count_events,
    deployments,
    events_of_type,
    load_views,
    stream_types,
    wait_terminal,
)
from tests.plugins.matrix import (
    admin,
    deployment_verdict,
    pg_role,
    prepare,
    read_marks,
    verdict,
    wait_for,
)
from tests.tools import MARKS_ENV

RABBIT = deployments("rabbitmq/postgres")


def started_after_pull(store: SqlStore) -> dict[str, int]:
    """Jobs whose work.started has a position after the (only) brake.pulled."""
    (pulled,) = events_of_type(store, "brake.pulled")
    return {
        e.stream_id.removeprefix("job-"): e.position
        for e in events_of_type(store, "work.started")
        if e.position > pulled.position
    }


def assert_held(view: JobView, brake: BrakeView) -> None:
    """Refused at execution, naming the brake (its id is the cause; its reason is shown)."""
    body = envelope(view).model_dump(mode="json")
    assert body["status"] == "refused" and body["terminal"], body
    assert body["next_action"] == "satisfy_precondition", body
    assert body["error"]["code"] == "BRAKE_ENGAGED", body
    assert body["error"]["cause"] == brake.brake_id, body
    assert brake.reason in body["error"]["message"], body


def pull_with_the_cli(dep: Deployment, reason: str) -> BrakeView:
    """`outcomes brake pull`, as an operator runs it (it needs only the database)."""
    argv = [str(OUTCOMES), "brake", "pull", "--scope", "global", "--reason", reason, "--json"]
    done = subprocess.run(argv, env=dep.env, capture_output=True, timeout=60, check=True)
    brake_id = json.loads(done.stdout)["brake_id"]
    (brake,) = [b for b in list_active(Ledger(dep.store)) if b.brake_id == brake_id]
    return brake


# --- 7a. pulled with jobs queued behind running work ------------------------------------------


@pytest.mark.parametrize("deployment", RABBIT, indirect=True)
def test_brake_pulled_with_jobs_queued(deployment: Deployment) -> None:
    dep = deployment
    marks = prepare(dep)
    dep.start_workers(count=2, concurrency=1)
    gate = dep.home.parent / "gate"
    running = [dep.submit("matrix.gated_charge", {"gate": str(gate)}).job_id for _ in range(2)]
    wait_for(lambda: len(read_marks(marks)) == 2, 30, "both workers to be busy")
    held = [dep.submit("matrix.charge", {"note": str(i)}).job_id for i in range(30)]
    brake = pull(Ledger(dep.store), "global", "runaway spend in the matrix", "ops")
    gate.touch()

    done = wait_terminal(dep.store, [*running, *held], timeout_s=60)
    counters = deployment_verdict(dep, "7a brake pulled with jobs queued")

    assert started_after_pull(dep.store) == {}
    assert {done[j].status for j in running} == {Status.SUCCEEDED}  # started before the pull
    for job_id in held:
        assert_held(done[job_id], brake)
        assert stream_types(dep.store, job_id) == ["job.accepted", "work.halted"]
    assert Counter(dep.side_effect_jobs()) == Counter(running)
    assert counters.by_status == {"work.halted": 30, "work.succeeded": 2}


# --- 7b. pulled during long multi-step work ---------------------------------------------------


@pytest.mark.parametrize("deployment", RABBIT, indirect=True)
def test_brake_pulled_during_multi_step_work(deployment: Deployment) -> None:
    dep = deployment
    marks = prepare(dep)
    dep.start_workers(count=1, concurrency=2)
    stops = dep.submit("matrix.steps", {"steps": 40, "step_s": 0.25}).job_id
    reports = dep.submit("matrix.steps", {"steps": 40, "step_s": 0.25, "catch": True}).job_id

    def steps_of(job_id: str) -> list[float]:
        return [m.at for m in read_marks(marks) if m.job_id == job_id]

    wait_for(lambda: min(len(steps_of(stops)), len(steps_of(reports))) >= 3, 30, "3 steps each")
    brake = pull(Ledger(dep.store), "global", "stop the long work", "ops")
    pulled_at = time.time()  # the pull has committed

    done = wait_terminal(dep.store, [stops, reports], timeout_s=60)
    counters = deployment_verdict(dep, "7b brake pulled during multi-step work")

    for job_id in (stops, reports):
        # A step whose brake check began after the pull committed would have seen the brake.
        late = [at for at in steps_of(job_id) if at > pulled_at]
        assert late == [], f"{len(late)} steps of {job_id} began after the pull"
        assert len(steps_of(job_id)) < 40
    assert_held(done[stops], brake)
    assert done[stops].attempts == 1  # it had started; the brake stopped it between steps
    partial = done[reports]
    assert partial.status is Status.PARTIAL and partial.partial is not None
    assert partial.partial.processed == len(steps_of(reports))
    assert partial.partial.total == 40
    assert len(partial.partial.skipped) == 40 - partial.partial.processed
    assert dep.side_effect_jobs() == []  # neither finished its work
    assert counters.by_status == {"work.halted": 1, "work.partial": 1}


# --- 7c. brake state unreadable: fail closed --------------------------------------------------

# Every brake check on Postgres reads the brake state through this one function (migration
# 0005): without the right to call it, the brake state is unreadable.
BRAKE_READ = "outcomes_brakes_holding(jsonb)"
DENIED = "permission denied for function outcomes_brakes_holding"


def unreadable_brakes(role: str) -> list[str]:
    return [f"REVOKE EXECUTE ON FUNCTION {BRAKE_READ} FROM PUBLIC, {role}"]


@pytest.mark.parametrize("deployment", RABBIT, indirect=True)
def test_brake_state_unreadable_fails_closed(deployment: Deployment) -> None:
    dep = deployment
    prepare(dep)
    with pg_role(dep.database_url) as (role, url):
        admin(dep.database_url, *unreadable_brakes(role))
        dep.env["OUTCOMES_DATABASE_URL"] = url  # the workers connect as the restricted role
        try:
            dep.start_workers(count=1, concurrency=2)
            ids = [
                dep.submit("matrix.charge" if i % 2 else "matrix.read", {"note": str(i)}).job_id
                for i in range(10)
            ]

            def rejected() -> int:
                with dep.store.reading() as reads:
                    states = [reads.dispatch_state(job_id) for job_id in ids]
                return sum(1 for state in states if state is not None and state.rejected)

            wait_for(
                lambda: rejected() == len(ids),
                60,
                "every delivery to fail on the unreadable brake state, reported as rejected",
            )
            assert DENIED in dep.worker_logs()
            assert count_events(dep.store, "work.started") == 0  # fail closed: nothing started
            views = load_views(dep.store, ids)
            assert {v.status for v in views.values()} == {Status.QUEUED}
            assert dep.side_effect_jobs() == []

            granted_at = dep.store.last_position()
            admin(dep.database_url, f"GRANT EXECUTE ON FUNCTION {BRAKE_READ} TO {role}")
            # Each worker reported the delivery it could not claim: on that evidence the
            # reconciler sends the jobs again; now they run.
            counters = deployment_verdict(dep, "7c brake state unreadable (fail closed)")
        finally:
            dep.stop_workers()

    done = load_views(dep.store, ids)
    assert {v.status for v in done.values()} == {Status.SUCCEEDED}
    started = events_of_type(dep.store, "work.started")
    assert len(started) == 10 and min(e.position for e in started) > granted_at
    for job_id in ids:
        again = [
            e.data.get("evidence")
            for e in dep.store.read_stream(f"job-{job_id}")
            if e.type == "job.redispatched"
        ]
        assert again and set(again) == {"worker_rejected"}, again
    assert Counter(dep.side_effect_jobs()) == Counter(ids)
    assert counters.by_status == {"work.succeeded": 10}


# --- 7d. pulled, then every worker restarted --------------------------------------------------


@pytest.mark.parametrize("deployment", RABBIT, indirect=True)
def test_brake_survives_restarting_every_worker(deployment: Deployment) -> None:
    dep = deployment
    prepare(dep)
    dep.start_workers(count=2, concurrency=2)
    warm = dep.submit("matrix.read", {}).job_id
    assert wait_terminal(dep.store, [warm])[warm].status is Status.SUCCEEDED
    held = [dep.submit("matrix.charge", {"note": str(i)}, dispatch=False).job_id for i in range(20)]
    brake = pull_with_the_cli(dep, "hold everything over the restart")

    dep.stop_workers()  # every worker: whatever they knew is gone
    for job_id in held:  # queued while no worker runs
        dep.dispatcher.dispatch(job_id)
    dep.start_workers(count=2, concurrency=2)
    done = wait_terminal(dep.store, held, timeout_s=60)
    assert started_after_pull(dep.store) == {}
    for job_id in held:
        assert_held(done[job_id], brake)

    release(Ledger(dep.store), brake.brake_id, "understood", "ops")
    fresh = [dep.submit("matrix.charge", {"note": "after"}).job_id for _ in range(3)]
    after = wait_terminal(dep.store, fresh)
    counters = deployment_verdict(dep, "7d brake pulled then every worker restarted")

    assert {v.status for v in after.values()} == {Status.SUCCEEDED}
    assert Counter(dep.side_effect_jobs()) == Counter([warm, *fresh])
    assert counters.by_status == {"work.halted": 20, "work.succeeded": 4}
    assert {done[j].code for j in held} == {Code.BRAKE_ENGAGED}


# --- 7c'. brake state becomes unreadable during multi-step work -------------------------------


@pytest.mark.parametrize("deployment", RABBIT, indirect=True)
def test_brake_state_unreadable_at_a_checkpoint_stops_the_work(deployment: Deployment) -> None:
    dep = deployment
    marks = prepare(dep)
    with pg_role(dep.database_url) as (role, url):
        dep.env["OUTCOMES_DATABASE_URL"] = url
        try:
            dep.start_workers(count=1, concurrency=1)
            job_id = dep.submit("matrix.steps", {"steps": 40, "step_s": 0.25}).job_id
            wait_for(lambda: len(read_marks(marks)) >= 3, 30, "3 steps")
            admin(dep.database_url, *unreadable_brakes(role))
            revoked_at = time.time()  # committed: every later brake check fails
            done = wait_terminal(dep.store, [job_id], timeout_s=60)[job_id]
        finally:
            dep.stop_workers()
    counters = deployment_verdict(dep, "7c' brake state unreadable at a checkpoint")

    steps = [m.at for m in read_marks(marks) if m.job_id == job_id]
    assert [at for at in steps if at > revoked_at] == []  # fail closed: no step after it
    assert len(steps) < 40 and done.status is Status.REFUSED and done.terminal
    assert done.error is not None
    assert (done.code, done.error.cause) == (Code.BRAKE_ENGAGED, "brake_state_unreadable")
    assert dep.side_effect_jobs() == []
    assert counters.by_status == {"work.halted": 1}


@pytest.mark.postgres
def test_an_unreadable_brake_at_a_checkpoint_is_not_a_tool_crash(
    pg_database: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    marks = tmp_path / "marks.log"
    monkeypatch.setenv(MARKS_ENV, str(marks))
    with pg_role(pg_database) as (role, url):
        store = open_sql(url)
        try:
            job = submit(
                Ledger(store), AGENT, JobRequest("matrix.steps", {"steps": 40, "step_s": 0.1})
            )
            outcome: list[object] = []
            runner = threading.Thread(
                target=lambda: outcome.append(Executor(Ledger(store), "w").execute(job.view.job_id))
            )
            runner.start()
            wait_for(lambda: len(read_marks(marks)) >= 2, 30, "2 steps")
            admin(pg_database, *unreadable_brakes(role))
            runner.join(timeout=30)
            view = load_views(store, [job.view.job_id])[job.view.job_id]
            # Fail closed (tested with workers above), and recorded as the brake, not a crash.
            if not view.terminal or view.status is Status.SUCCEEDED:
                raise RuntimeError(f"not stopped: {view}")
            try:
                verdict(store, "7c' unreadable brake at a checkpoint (in-process)")
            except AssertionError as exc:
                raise RuntimeError(str(exc)) from exc
            assert view.code is Code.BRAKE_ENGAGED, (view.code, view.error)
        finally:
            store.close()

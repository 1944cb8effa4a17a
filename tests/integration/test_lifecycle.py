"""The job lifecycle end to end, with real Celery worker processes (issue 3).

Each test runs `outcomes worker` processes against a real broker (RabbitMQ, Redis, or the
embedded filesystem broker) and a real ledger (Postgres; SQLite for the zero-setup default),
submits through the same path as the API, and reads only what the ledger recorded.
"""

from __future__ import annotations

import threading
import traceback
import uuid
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import timedelta
from multiprocessing import get_context
from typing import Any

import psycopg
import pytest

import ledger.services.work as work
from ledger.codes import Code, NextAction, Status
from ledger.decisions import Caller, JobRequest
from ledger.errors import StorageUnavailableError
from ledger.events import NewEvent, WorkRetryScheduled, WorkSucceeded, job_stream
from ledger.job_view import JobView, envelope
from ledger.persistence.store import SqlStore, SqlWrites
from ledger.services.brakes import pull, release
from ledger.services.ledger import Ledger
from ledger.services.submit import submit
from ledger.tools import load_tool_modules
from tests.databases import PG_ADMIN_DSN
from tests.factories import ERROR_KEYS, open_sql
from tests.integration.conftest import (
    AGENT,
    ON_EVERY_BROKER,
    TOOL_MODULES,
    Deployment,
    count_events,
    deployments,
    events_of_type,
    load_views,
    wait_terminal,
    wait_until,
)
from tests.tools import QUOTA_LIMIT
from workers.app import EXECUTE_TASK

SECRET = "hunter2-Zq9vX4pLm"
TERMINAL_WORK = ("work.succeeded", "work.declined", "work.partial", "work.failed", "work.halted")


# --- 1. every outcome and every code --------------------------------------------------------


@dataclass(frozen=True)
class Case:
    tool: str
    args: dict[str, Any]
    status: Status
    action: NextAction
    code: Code | None = None
    attempts: int | None = None
    error: dict[str, Any] = field(default_factory=dict)  # expected subset of the error object
    caller: Caller = AGENT


REFUSED = NextAction.SATISFY_PRECONDITION
STOP = NextAction.STOP_AND_REPORT
TRACKER = "tracker.read_issue"
CARDS_ONLY = Caller(account="acme", token_id="tok-cards", tools=frozenset({"social.draw_card"}))


def refused(
    tool: str, args: dict[str, Any], code: Code, caller: Caller = AGENT, **error: Any
) -> Case:
    """Refused at submit: recorded by the API, never attempted."""
    return Case(tool, args, Status.REFUSED, REFUSED, code, 0, error, caller)


def failed(
    tool: str,
    args: dict[str, Any],
    code: Code,
    attempts: int = 1,
    action: NextAction = STOP,
    **error: Any,
) -> Case:
    """Failed in a worker, after `attempts` attempts."""
    return Case(tool, args, Status.FAILED, action, code, attempts, error)


def tracker(ref: str, connector: str = "enabled") -> dict[str, Any]:
    return {"issue_ref": ref, "connector": connector}


CASES: dict[str, Case] = {
    "succeeded": Case(TRACKER, tracker("T-1"), Status.SUCCEEDED, NextAction.ACCEPT),
    "declined": Case(
        "social.draw_card",
        {"post_id": "p-1", "has_cover": True},
        Status.DECLINED,
        NextAction.ACCEPT,
    ),
    "partial_mail": Case(
        "mail.send_release_note",
        {"recipients": ["ana@example.com", "bob"]},
        Status.PARTIAL,
        NextAction.USE_PARTIAL_AND_NARROW,
    ),
    "partial_stale": Case(
        TRACKER, tracker("T-2", "stale"), Status.PARTIAL, NextAction.USE_PARTIAL_AND_NARROW
    ),
    "input_missing": refused(TRACKER, {}, Code.INPUT_MISSING, fix="send issue_ref"),
    "input_invalid": refused(TRACKER, {"issue_ref": ""}, Code.INPUT_INVALID),
    "unknown_tool": refused(
        "nope.no_such_tool", {}, Code.CAPABILITY_UNAVAILABLE, dependency="nope.no_such_tool"
    ),
    "token_not_allowed": refused(
        TRACKER,
        tracker("T-1"),
        Code.ACCESS_DENIED,
        CARDS_ONLY,
        required_capability=f"tool:{TRACKER}",
    ),
    "reference_missing": failed(
        TRACKER,
        tracker("T-404"),
        Code.REFERENCE_UNRESOLVED,
        retryable=False,
        fix="check the issue id",
    ),
    "reference_ambiguous": failed(
        TRACKER, tracker("checkout"), Code.REFERENCE_UNRESOLVED, fix="choose one of: T-1, T-7"
    ),
    "connector_disabled": failed(
        TRACKER,
        tracker("T-1", "disabled"),
        Code.CAPABILITY_UNAVAILABLE,
        required_capability="tracker connector",
        retryable=False,
    ),
    "no_scope": failed(
        TRACKER,
        tracker("T-1", "no_scope"),
        Code.ACCESS_DENIED,
        dependency="tracker",
        operation="read issue metadata and recent comments",
        required_capability="tracker.issue:read",
        safe_fallback="inspect the local repository and prepare a provisional plan",
        fix="grant read access or paste an approved export",
        message="I could not read the linked tracker item.",
        retryable=False,
        retry_after_s=None,
        cause=None,
    ),
    # The fingerprint repeats: one retry, then stop.
    "source_unreliable": failed(
        TRACKER, tracker("T-1", "timeout"), Code.SOURCE_UNRELIABLE, 2, retryable=True
    ),
    "no_outcome": failed(
        "debug.return_nothing", {}, Code.OUTCOME_MISSING, cause="no_outcome_returned"
    ),
    "no_outcome_spending": failed(
        "itest.spend_nothing",
        {},
        Code.OUTCOME_MISSING,
        action=NextAction.VERIFY_AT_SOURCE,
        cause="no_outcome_returned",
    ),
    "crash": failed(
        "debug.crash",
        {"secret": SECRET},
        Code.TOOL_CRASHED,
        retryable=False,
        dependency="debug.crash",
    ),
    "deadline": failed(
        "debug.slow", {"seconds": 2.6, "steps": 26}, Code.DEADLINE_EXCEEDED, dependency="debug.slow"
    ),
}


def check_envelope(name: str, case: Case, view: JobView) -> None:
    body = envelope(view).model_dump(mode="json")
    where = f"{name}: {body}"
    assert body["status"] == case.status.value, where
    assert body["terminal"] is True, where
    assert body["next_action"] == case.action.value, where
    if case.attempts is not None:
        assert body["attempts"] == case.attempts, where
    assert body["recorded_by"] == ("api" if case.attempts == 0 else "worker"), where
    if case.code is None:
        assert body["error"] is None, where
        return
    error = body["error"]
    assert set(error) == ERROR_KEYS, where
    assert error["code"] == case.code.value, where
    assert error["message"], where
    assert {k: error[k] for k in case.error} == case.error, where


@pytest.mark.parametrize(
    "deployment", [*ON_EVERY_BROKER, *deployments("embedded/sqlite")], indirect=True
)
def test_every_outcome_and_code_end_to_end(deployment: Deployment) -> None:
    store = deployment.store
    frozen = pull(Ledger(store), "account:frozen", "account under review", "ops")
    deployment.start_workers(count=2)

    views = {name: deployment.submit(c.tool, c.args, c.caller) for name, c in CASES.items()}
    sweeps = [deployment.submit("seo.keyword_sweep", {"keywords": ["a"]}) for _ in range(4)]
    braked = deployment.submit(TRACKER, {"issue_ref": "T-1"}, Caller("frozen", "tok-frozen"))
    assert [v.status for v in sweeps] == [Status.QUEUED] * 3 + [Status.REFUSED]

    done = wait_terminal(store, [v.job_id for v in [*views.values(), *sweeps]], timeout_s=90)
    for name, case in CASES.items():
        check_envelope(name, case, done[views[name].job_id])

    succeeded = done[views["succeeded"].job_id]
    assert succeeded.result == {"issue": {"title": "Checkout fails on Safari", "state": "open"}}
    declined = done[views["declined"].job_id]
    assert declined.declined_reason and "cover" in declined.declined_reason
    assert declined.result == {"post_id": "p-1", "generated": False}
    mail = done[views["partial_mail"].job_id].partial
    assert mail is not None and (mail.processed, mail.skipped, mail.total) == (1, ["bob"], 2)
    stale = done[views["partial_stale"].job_id]
    assert stale.result is not None and "confidence" in stale.result

    quota = envelope(done[sweeps[3].job_id]).model_dump(mode="json")["error"]
    assert quota["code"] == Code.QUOTA_EXCEEDED and quota["retryable"] is True
    assert quota["retry_after_s"] is not None and 1 <= quota["retry_after_s"] <= 3600
    assert envelope(done[sweeps[3].job_id]).next_action is REFUSED
    assert [done[v.job_id].status for v in sweeps[:3]] == [Status.SUCCEEDED] * 3

    brake_error = envelope(braked).model_dump(mode="json")["error"]
    assert braked.status is Status.REFUSED and set(brake_error) == ERROR_KEYS
    assert brake_error["code"] == Code.BRAKE_ENGAGED and brake_error["cause"] == frozen.brake_id
    assert "account under review" in brake_error["message"]
    assert envelope(braked).next_action is REFUSED
    assert (braked.attempts, braked.recorded_by) == (0, "api")

    # Only the spending tools that ran left an effect, once each.
    spent = Counter(deployment.side_effect_jobs())
    expected = {views["partial_mail"].job_id, views["no_outcome_spending"].job_id}
    assert spent == Counter(expected | {v.job_id for v in sweeps[:3]})

    # A crash's raw detail is kept for operators, scrubbed; nothing carries the secret.
    crash_id = views["crash"].job_id
    (failed,) = [e for e in store.read_stream(job_stream(crash_id)) if e.type == "work.failed"]
    assert failed.data["detail"].startswith("RuntimeError: connector blew up")
    assert "[REDACTED]" in failed.data["detail"]
    assert SECRET not in str(failed.data)
    assert SECRET not in envelope(done[crash_id]).model_dump_json()


# --- 2. the brake ---------------------------------------------------------------------------


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
                submitted.append(deployment.submit("itest.charge", {"amount": i, "delay_s": 0.2}))
        except BaseException as exc:
            errors.append(exc)

    submitter = threading.Thread(target=stream, name="submitter")
    submitter.start()
    try:
        wait_until(lambda: count_events(store, "work.started") >= 8, 60, "8 jobs to start")
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


# --- 3. a redelivered message ----------------------------------------------------------------


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


# --- 4. the retry policy ---------------------------------------------------------------------


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


# --- 5. the quota under concurrency ----------------------------------------------------------

SUBMITTERS = 4
EACH = 25
SPAWN = get_context("spawn")


def submit_in_child(url: str, barrier: Any, results: Any) -> None:
    """A separate OS process (like one API process) firing its share of submits at once."""
    try:
        load_tool_modules(TOOL_MODULES.split(","))
        store = open_sql(url)
        barrier.wait(timeout=120)
        request = JobRequest(tool="itest.quota_ten", args={})
        with ThreadPoolExecutor(EACH) as pool:
            views = list(
                pool.map(lambda _: submit(Ledger(store), AGENT, request).view, range(EACH))
            )
        results.put([(v.job_id, v.status.value) for v in views])
        store.close()
    except BaseException:
        results.put(traceback.format_exc())


@pytest.mark.parametrize(
    "backend", ["sqlite_database", pytest.param("pg_database", marks=pytest.mark.postgres)]
)
def test_quota_is_exact_under_parallel_submits(
    backend: str, request: pytest.FixtureRequest
) -> None:
    url = str(request.getfixturevalue(backend))
    barrier = SPAWN.Barrier(SUBMITTERS)
    results = SPAWN.Queue()
    children = [
        SPAWN.Process(target=submit_in_child, args=(url, barrier, results), daemon=True)
        for _ in range(SUBMITTERS)
    ]
    for child in children:
        child.start()
    try:
        answers = []
        for _ in children:
            answer = results.get(timeout=180)
            assert isinstance(answer, list), answer
            answers.extend(answer)
    finally:
        for child in children:
            child.join(timeout=30)
            if child.is_alive():
                child.kill()
    assert len(answers) == SUBMITTERS * EACH == 100

    store = open_sql(url)
    try:
        views = load_views(store, [job_id for job_id, _ in answers])
    finally:
        store.close()
    assert {job_id: views[job_id].status.value for job_id, _ in answers} == dict(answers)
    accepted = [v for v in views.values() if v.accepted]
    refused = [v for v in views.values() if not v.accepted]
    assert len(accepted) == QUOTA_LIMIT
    assert len(refused) == 100 - QUOTA_LIMIT
    for view in refused:
        assert view.error is not None and view.error.code is Code.QUOTA_EXCEEDED
        assert view.error.retry_after_s is not None and view.error.retry_after_s >= 1
        assert envelope(view).next_action is REFUSED


# --- 6. the outcome write survives a database blip -------------------------------------------


class CommitThenBlip(SqlStore):
    """The first transaction commits, then the connection is reported lost: the writer cannot
    know whether its write landed (the worst kind of blip)."""

    def __init__(self, inner: SqlStore) -> None:
        super().__init__(inner.engine, inner.projections)
        self.blips = 1

    @contextmanager
    def transaction(self) -> Iterator[SqlWrites]:
        with super().transaction() as tx:
            yield tx
        if self.blips:
            self.blips -= 1
            raise StorageUnavailableError("connection lost after commit (simulated)")


def terminate_other_backends(url: str) -> None:
    dbname = url.rsplit("/", 1)[1]
    with psycopg.connect(PG_ADMIN_DSN, autocommit=True) as conn:
        conn.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE datname = %s AND pid <> pg_backend_pid()",
            (dbname,),
        )


def claimed_job(store: SqlStore) -> tuple[str, int]:
    job = submit(Ledger(store), AGENT, JobRequest("tracker.read_issue", {"issue_ref": "T-1"})).view
    claim = work.claim(Ledger(store), job.job_id, "itest-worker", 30.0)
    assert claim.result is work.ClaimResult.CLAIMED
    return job.job_id, claim.version


@pytest.mark.parametrize(
    ("blip", "backend"),
    [
        ("commit_then_lost", "sqlite_database"),
        pytest.param("commit_then_lost", "pg_database", marks=pytest.mark.postgres),
        pytest.param("backend_terminated", "pg_database", marks=pytest.mark.postgres),
    ],
)
def test_the_outcome_write_survives_a_database_blip(
    blip: str, backend: str, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> None:
    database_url = str(request.getfixturevalue(backend))
    load_tool_modules(TOOL_MODULES.split(","))
    real = open_sql(database_url)
    try:
        job_id, version = claimed_job(real)
        store: SqlStore = CommitThenBlip(real) if blip == "commit_then_lost" else real
        tries: list[str] = []
        record_once = work._record_once

        def spy(*args: Any) -> work.Recorded:
            try:
                recorded = record_once(*args)
            except StorageUnavailableError:
                tries.append("unavailable")
                raise
            tries.append("ok")
            return recorded

        monkeypatch.setattr(work, "_record_once", spy)
        if blip == "backend_terminated":
            terminate_other_backends(database_url)  # kills the store's pooled connection
        event = NewEvent(payload=WorkSucceeded(attempt=1, result={"ok": True}), actor="w")
        recorded = work.record_outcome(Ledger(store), job_id, version, event)

        assert tries == ["unavailable", "ok"]
        assert recorded.late is False
        stream = real.read_stream(job_stream(job_id))
        assert [e.event_id for e in stream].count(event.event_id) == 1
        assert [e.type for e in stream] == ["job.accepted", "work.started", "work.succeeded"]
        assert load_views(real, [job_id])[job_id].status is Status.SUCCEEDED
    finally:
        real.close()

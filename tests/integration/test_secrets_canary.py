"""Canaries (contract §3): a job's declared secret (a `SecretStr` argument) that a tool repeats
everywhere a tool may write text (its exception, every field of a `ToolFailure`, a retry's
fingerprint, a decline's reason, a brake it raises itself, a late outcome) comes out of no HTTP
page for any role, no `outcomes` command's output and no log line. Real API, real CLI, real
ledger (SQLite and Postgres); the tools run in this process through the worker's own use case
(`Executor`).

`outcomes audit export` is exact (its hashes must verify elsewhere): it holds the secret as the
ledger stores it, sealed, and so holds no piece of it either.
"""

from __future__ import annotations

import logging
import threading
import uuid

import orjson
import pytest
from fastapi.testclient import TestClient

from ledger.codes import Code, OutcomeMissingCause, Status
from ledger.decisions import Caller, JobRequest
from ledger.error_info import ErrorInfo
from ledger.events import JobOutcomeMissing, NewEvent, job_stream
from ledger.persistence.sql_store import SqlStore
from ledger.runtime.ledger import Ledger
from ledger.scrub import MAX_DETAIL
from ledger.services.execute import Execution, Executor
from ledger.services.submit import submit as submit_job
from tests.factories import get_job
from tests.plugins.api import RecordingDispatcher, Tokens, bearer
from tests.plugins.cli import Invoke
from tests.plugins.deployments import wait_until
from tests.tools import CANARY_GATE

WORKER = "canary-host:4242"
TOOLS = ("canary.crash", "canary.refuse", "canary.flaky", "canary.decline", "canary.halt")


def canary() -> str:
    """A password with `@`, `;` and a space (the reviewer's), and a part no pattern knows."""
    return f"p@ss;word hunter2 {uuid.uuid4().hex[:16]}"


def leaks(secret: str, text: str) -> list[str]:
    """The pieces of the secret found in the text."""
    return [piece for piece in (secret, *secret.split(" ")) if piece in text]


def submit(client: TestClient, token: str, tool: str, secret: str) -> str:
    response = client.post(
        "/v1/jobs", json={"tool": tool, "args": {"secret": secret}}, headers=bearer(token)
    )
    assert response.status_code == 202, response.text
    job_id: str = response.json()["job_id"]
    return job_id


def close_while_running(store: SqlStore, job_id: str) -> Execution:
    """Run canary.late, close its job meanwhile (as the reconciler does when a worker looks
    lost), then let the tool finish: what it reports is kept as a late outcome."""
    ledger = Ledger(store)
    done: list[Execution] = []
    runner = threading.Thread(target=lambda: done.append(Executor(ledger, WORKER).execute(job_id)))
    runner.start()
    try:
        wait_until(lambda: _status(ledger, job_id) is Status.RUNNING, 30, "the late tool to start")
        view = get_job(ledger, job_id)
        assert view is not None
        missing = JobOutcomeMissing(
            attempt=1,
            cause=OutcomeMissingCause.WORKER_LOST,
            error=ErrorInfo(code=Code.OUTCOME_MISSING, message="The worker went silent."),
        )
        store.append(
            job_stream(job_id), [NewEvent(payload=missing, actor="reconciler")], view.stream_version
        )
    finally:
        CANARY_GATE.set()
        runner.join(30)
    (execution,) = done
    return execution


def _status(ledger: Ledger, job_id: str) -> Status | None:
    view = get_job(ledger, job_id)
    return view.status if view else None


def test_a_secret_a_tool_repeats_leaves_through_no_page_command_or_log(
    client: TestClient,
    tokens: Tokens,
    store: SqlStore,
    dispatcher: RecordingDispatcher,
    outcomes: Invoke,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    CANARY_GATE.clear()
    secret = canary()
    jobs = {tool: submit(client, tokens.acme, tool, secret) for tool in TOOLS}
    executor = Executor(Ledger(store), WORKER, dispatcher)
    for job_id in jobs.values():
        executor.execute(job_id)
    executor.execute(jobs["canary.flaky"])  # its retry (dispatched above) runs now
    jobs["canary.late"] = submit(client, tokens.acme, "canary.late", secret)
    assert close_while_running(store, jobs["canary.late"]).late

    views = {tool: get_job(store, job_id) for tool, job_id in jobs.items()}
    assert {tool: (v.status, v.code) for tool, v in views.items() if v} == {
        "canary.crash": (Status.FAILED, Code.TOOL_CRASHED),
        "canary.refuse": (Status.FAILED, Code.ACCESS_DENIED),
        "canary.flaky": (Status.FAILED, Code.SOURCE_UNRELIABLE),
        "canary.decline": (Status.DECLINED, None),
        "canary.halt": (Status.REFUSED, Code.BRAKE_ENGAGED),
        "canary.late": (Status.FAILED, Code.OUTCOME_MISSING),
    }

    pages: dict[str, str] = {}
    roles = {"agent": tokens.acme, "operator": tokens.operator, "auditor": tokens.auditor}
    for role, token in roles.items():
        paths = [f"/v1/jobs/{j}{tail}" for j in jobs.values() for tail in ("", "/events")]
        paths += [f"/v1/jobs/{jobs['canary.late']}?wait=0.1", "/v1/jobs?limit=1000"]
        if role != "agent":
            paths += ["/v1/audit/events?limit=1000", "/v1/audit/summary", "/v1/brakes"]
        for path in paths:
            response = client.get(path, headers=bearer(token))
            assert response.status_code == 200, (role, path, response.text)
            pages[f"{role} {path}"] = f"{response.headers!r} {response.text}"
    for path in ("/readyz", "/healthz"):
        pages[path] = client.get(path).text

    commands: dict[str, str] = {}
    for args in (
        *(("jobs", "show", j, *json) for j in jobs.values() for json in ((), ("--json",))),
        ("jobs", "list", "--json"),
        ("jobs", "list"),
        *(("audit", "events", "--format", f) for f in ("table", "jsonl", "csv")),
        ("audit", "summary", "--json"),
    ):
        commands[" ".join(args)] = outcomes(*args).output

    found = {
        where: leaks(secret, text)
        for where, text in [*pages.items(), *commands.items(), ("logs", caplog.text)]
    }
    assert {where: pieces for where, pieces in found.items() if pieces} == {}

    # The raw detail is kept for staff, scrubbed; agents do not get it, not even of a late
    # outcome, nor the worker's identity, the hashes or the global position.
    crash, late = jobs["canary.crash"], jobs["canary.late"]
    crash_events = client.get(f"/v1/jobs/{crash}/events", headers=bearer(tokens.operator)).json()
    (failed,) = [e for e in crash_events["events"] if e["type"] == "work.failed"]
    assert failed["data"]["detail"].startswith("RuntimeError: [REDACTED]")
    agent_pages = " ".join(text for where, text in pages.items() if where.startswith("agent"))
    for internal in (WORKER, '"detail"', '"fingerprint"', '"hash"', '"prev_hash"', "position"):
        assert internal not in agent_pages, internal
    for where, text in pages.items():
        if where.startswith("operator"):
            assert '"hash"' not in text and '"prev_hash"' not in text, where
    envelope = client.get(f"/v1/jobs/{late}", headers=bearer(tokens.operator)).json()
    (late_outcome,) = envelope["late_outcomes"]
    assert set(late_outcome) == {"attempt", "type", "error"}

    # The export is exact: the secret as stored, sealed in the decisions.
    exported = [orjson.loads(line) for line in outcomes("audit", "export").stdout.splitlines()]
    assert [e["type"] for e in exported if leaks(secret, orjson.dumps(e).decode())] == []
    decisions = [e for e in exported if e["type"] == "job.accepted"]
    canaries = [e for e in decisions if e["data"]["tool"].startswith("canary.")]
    assert len(canaries) == len(jobs)
    assert all(e["data"]["args"]["secret"].startswith("ol-sealed:v1:") for e in canaries)


def test_a_256_kib_echo_is_recorded_as_a_crash_without_the_secret(store: SqlStore) -> None:
    """The echo is adversarial for the old patterns (`a-a-a-…` made them quadratic: the worker
    outlived its lease and the job ended OUTCOME_MISSING). Now it is a TOOL_CRASHED like any
    crash, and no piece of the secret is kept (the decision holds it sealed)."""
    tail = uuid.uuid4().hex
    secret = ("a-" * (128 * 1024))[: 256 * 1024 - len(tail)] + tail
    ledger = Ledger(store)
    request = JobRequest("canary.crash", {"secret": secret})
    job_id = submit_job(ledger, Caller("acme", "tok-acme"), request).view.job_id
    done = Executor(ledger, WORKER, lease_s=5).execute(job_id)
    view = get_job(ledger, job_id)
    assert done.event_type == "work.failed" and view is not None
    assert (view.status, view.code) == (Status.FAILED, Code.TOOL_CRASHED)
    recorded = store.read_stream(job_stream(job_id))
    assert [e.type for e in recorded] == ["job.accepted", "work.started", "work.failed"]
    kept = orjson.dumps([e.data for e in recorded]).decode()
    assert [piece for piece in (tail, "a-a-a-a-a-a-a-a-") if piece in kept] == []
    assert recorded[-1].data["detail"].startswith("RuntimeError: [REDACTED]")
    assert len(recorded[-1].data["detail"]) <= MAX_DETAIL + 1

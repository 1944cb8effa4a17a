"""Reliability matrix, secrets (scenario 11): a canary secret declared in tool arguments (a
`SecretStr`), in the Authorization header and in a tool's exception text must not come out of
any interface (API responses, event pages for every role, the API's logs, the workers' logs,
broker messages) nor rest in the database's tables: the ledger keeps it sealed (contract §3).
An argument that is not declared secret is what was asked: staff read it on event pages.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import httpx
import pytest
from kombu.connection import Connection
from sqlalchemy import inspect, text

import tests.tools  # noqa: F401  (the API accepts jobs for these tools)
from ledger.persistence.sql_store import SqlStore
from ledger.runtime.ledger import Ledger
from ledger.services.execute import Executor
from ledger.services.tokens import create as create_token
from tests.factories import open_sql
from tests.plugins.api import bearer
from tests.plugins.deployments import Deployment, deployments, wait_terminal, wait_until
from tests.plugins.matrix import AMQP_URL, api_server, deployment_verdict, prepare, verdict


def canary() -> str:
    """A secret no pattern recognises: only the context around it can get it scrubbed."""
    return f"canary{uuid.uuid4().hex}"


class NullDispatcher:
    def dispatch(self, job_id: str, delay_s: float = 0.0) -> None:
        """The job stays queued (nothing in this test runs it)."""


def peek(url: str, queue: str) -> list[str]:
    """Every message waiting in the queue (body, headers, properties), left in the queue: read
    without acknowledging, then the channel closes and the broker requeues them."""
    seen = []
    with Connection(url, connect_timeout=5) as conn:  # type: ignore[no-untyped-call]
        channel = conn.channel()
        while (message := channel.basic_get(queue=queue, no_ack=False)) is not None:
            seen.append(f"{message.body!r} {message.properties!r}")
        channel.close()
    return seen


def database_rows(store: SqlStore) -> list[str]:
    """Every row of every table of the ledger's database, as Postgres prints it."""
    with store.engine.connect() as conn:
        tables = inspect(conn).get_table_names()
        return [
            str(row)
            for name in tables
            for row in conn.execute(text(f'SELECT t::text FROM "{name}" t')).all()
        ]


@contextmanager
def uvicorn_logs_captured(caplog: pytest.LogCaptureFixture) -> Iterator[None]:
    """uvicorn's loggers do not propagate to the root logger: listen to them directly."""
    loggers = [logging.getLogger(n) for n in ("uvicorn", "uvicorn.error", "uvicorn.access")]
    for logger in loggers:
        logger.addHandler(caplog.handler)
    try:
        yield
    finally:
        for logger in loggers:
            logger.removeHandler(caplog.handler)


@pytest.mark.parametrize("deployment", deployments("rabbitmq/postgres"), indirect=True)
def test_no_secret_through_any_interface(
    deployment: Deployment, caplog: pytest.LogCaptureFixture
) -> None:
    dep = deployment
    prepare(dep)
    secret = canary()
    asked = f"asked-{uuid.uuid4().hex[:8]}"  # not declared secret: what was asked, for staff
    caplog.set_level(logging.DEBUG)
    tokens = {
        r: create_token(Ledger(dep.store), "*" if r != "agent" else "acme", r, None, "t").token
        for r in ("agent", "auditor", "operator")
    }
    seen: list[str] = []  # every response: status line, headers, body

    with (
        uvicorn_logs_captured(caplog),
        api_server(dep.store, dep.dispatcher) as url,
        httpx.Client(base_url=url, timeout=30) as http,
    ):

        def call(path: str, role: str = "agent", **kwargs: Any) -> httpx.Response:
            method = "POST" if "json" in kwargs else "GET"
            response = http.request(method, path, headers=bearer(tokens[role]), **kwargs)
            seen.append(f"{response.status_code} {response.headers!r} {response.text}")
            return response

        crash = call("/v1/jobs", json={"tool": "debug.crash", "args": {"secret": secret}})
        charge = call("/v1/jobs", json={"tool": "matrix.charge", "args": {"note": asked}})
        # Refused by the schema (user is missing), its password sealed all the same.
        invalid = call(
            "/v1/jobs", json={"tool": "vault.login", "args": {"vault": "v", "password": secret}}
        )
        unknown = call("/v1/jobs", json={"tool": "nope.missing", "args": {"key": asked}})
        assert [crash.status_code, charge.status_code] == [202, 202]
        assert [invalid.status_code, unknown.status_code] == [422, 422]
        for scheme in ("Bearer", "Basic", "Token"):  # the canary as a credential
            for method in ("GET", "POST"):
                response = http.request(
                    method, "/v1/jobs", headers={"Authorization": f"{scheme} {secret}"}, json={}
                )
                seen.append(f"{response.status_code} {response.headers!r} {response.text}")
                assert response.status_code == 401

        # The broker carries job ids only (peeked before any worker consumes them, once the
        # API's outbox has published them: it does so after each answer).
        wait_until(lambda: len(peek(AMQP_URL, dep.queue)) == 2, 30, "both jobs published")
        messages = peek(AMQP_URL, dep.queue)
        job_ids = [crash.json()["job_id"], charge.json()["job_id"]]
        assert len(messages) == 2 and all(any(j in m for j in job_ids) for m in messages)

        dep.start_workers(count=1, concurrency=2)
        done = wait_terminal(dep.store, job_ids)
        assert done[job_ids[0]].code == "TOOL_CRASHED"
        recorded = [*job_ids, invalid.json()["job_id"], unknown.json()["job_id"]]
        for job_id in recorded:
            call(f"/v1/jobs/{job_id}")
            call(f"/v1/jobs/{job_id}?wait=1")
            for role in ("agent", "auditor", "operator"):
                assert call(f"/v1/jobs/{job_id}/events", role).status_code == 200
        call("/v1/jobs")
        for role in ("auditor", "operator"):
            assert call("/v1/audit/events?limit=1000", role).status_code == 200
            call("/v1/audit/summary", role)
            call("/v1/brakes", role)
        crash_events = call(f"/v1/jobs/{job_ids[0]}/events", "auditor").json()["events"]
        charge_events = call(f"/v1/jobs/{job_ids[1]}/events", "operator").json()["events"]

    counters = deployment_verdict(dep, "11 canary secret through every interface")
    (failed,) = [e for e in crash_events if e["type"] == "work.failed"]
    assert "[REDACTED]" in failed["data"]["detail"]  # the raw detail is kept, scrubbed
    assert charge_events[0]["data"]["args"] == {"note": asked}  # what was asked, readable
    assert crash_events[0]["data"]["args"] == {"secret": "(secret)"}
    leaks = {
        "API responses and event pages": [s for s in seen if secret in s],
        "database tables": [row for row in database_rows(dep.store) if secret in row],
        "broker messages": [m for m in messages if secret in m],
        "worker logs": [line for line in dep.worker_logs().splitlines() if secret in line],
        "API logs": [line for line in caplog.text.splitlines() if secret in line],
    }
    assert {where: found for where, found in leaks.items() if found} == {}
    for token in tokens.values():
        assert token not in caplog.text and token not in dep.worker_logs()
        assert not [s for s in seen if token in s]
    assert counters.by_status == {"job.refused": 2, "work.failed": 1, "work.succeeded": 1}


@pytest.mark.postgres
def test_a_declared_secret_does_not_come_back_through_event_pages(pg_database: str) -> None:
    store: SqlStore = open_sql(pg_database)
    secret = canary()
    try:
        agent = create_token(Ledger(store), "acme", "agent", None, "t").token
        auditor = create_token(Ledger(store), "*", "auditor", None, "t").token
        with (
            api_server(store, NullDispatcher()) as url,
            httpx.Client(base_url=url, timeout=30) as http,
        ):
            args = {"vault": "v-1", "user": "ann", "password": secret, "mode": "ok"}
            posted = http.post(
                "/v1/jobs", headers=bearer(agent), json={"tool": "vault.login", "args": args}
            )
            job_id = posted.json()["job_id"]
            Executor(Ledger(store), "matrix-worker").execute(job_id)  # the job runs (in-process)
            pages = {
                "agent events": http.get(f"/v1/jobs/{job_id}/events", headers=bearer(agent)),
                "auditor events": http.get(f"/v1/jobs/{job_id}/events", headers=bearer(auditor)),
                "audit events": http.get("/v1/audit/events", headers=bearer(auditor)),
                "envelope": http.get(f"/v1/jobs/{job_id}", headers=bearer(agent)),
            }
        # Everything but the leak itself must hold: those failures are not the expected one.
        if {p.status_code for p in pages.values()} != {200} or posted.status_code != 202:
            raise RuntimeError(f"unexpected answers: {pages}")
        verdict(store, "11b declared secrets and event pages")
        assert {name for name, page in pages.items() if secret in page.text} == set()
        assert pages["envelope"].json()["result"] == {
            "vault": "v-1",
            "user": "ann",
            "echo": "[REDACTED]",
        }
        assert [row for row in database_rows(store) if secret in row] == []
    finally:
        store.close()

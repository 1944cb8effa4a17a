"""The fast path (api/fast_path.py): the agents' submit and read skip the framework's stack,
and answer exactly as it would; whatever is not plainly valid still goes through it."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient

from api.app import create_app
from api.fast_path import fast_endpoint
from ledger.persistence.sql_store import SqlStore
from ledger.runtime.ledger import Ledger
from tests.plugins.api import RecordingDispatcher, Tokens, bearer, new_job
from tests.tools import ECHO

NOBODYS = str(uuid.uuid4())


def scope(method: str, path: str, query: bytes = b"") -> dict[str, Any]:
    return {"type": "http", "method": method, "path": path, "query_string": query}


@pytest.mark.parametrize(
    ("method", "path", "query"),
    [
        ("POST", "/v1/jobs", b""),
        ("GET", "/v1/jobs/abc", b""),
        ("GET", "/v1/jobs/abc", b"wait=30&until=terminal"),
        ("GET", "/v1/jobs/abc", b"wait=60"),
    ],
)
def test_the_two_routes_plainly_valid_take_the_fast_path(
    method: str, path: str, query: bytes
) -> None:
    assert fast_endpoint(scope(method, path, query)) is not None


@pytest.mark.parametrize(
    ("method", "path", "query"),
    [
        ("GET", "/v1/jobs", b""),  # the changes feed
        ("PUT", "/v1/jobs", b""),
        ("HEAD", "/v1/jobs/abc", b""),
        ("GET", "/v1/jobs/", b""),
        ("GET", "/v1/jobs/abc/events", b""),
        ("POST", "/v1/jobs/abc/cancel", b""),
        ("POST", "/v1/jobs/", b""),
        ("GET", "/v1/jobs/abc", b"wait=abc"),
        ("GET", "/v1/jobs/abc", b"wait=-1"),
        ("GET", "/v1/jobs/abc", b"wait=61"),
        ("GET", "/v1/jobs/abc", b"wait=nan"),
        ("GET", "/v1/jobs/abc", b"wait=1e1"),
        ("GET", "/v1/jobs/abc", b"wait=1_0"),
        ("GET", "/v1/jobs/abc", b"wait=1&wait=2"),
        ("GET", "/v1/jobs/abc", b"until=never"),
        ("GET", "/v1/jobs/abc", b"until=terminal&until=change"),
        ("GET", "/v1/jobs/abc", b"wait=0.5&until=change&other=1"),  # refused there (422)
    ],
)
def test_anything_else_is_left_to_the_framework(method: str, path: str, query: bytes) -> None:
    assert fast_endpoint(scope(method, path, query)) is None


@pytest.fixture
def framework_only(store: SqlStore) -> Iterator[TestClient]:
    """The same API over the same ledger with the fast path off: the answers to compare."""
    app = create_app(Ledger(store), RecordingDispatcher())
    app.fast_path = None
    with TestClient(app) as client:
        yield client


def answers(client: TestClient, tokens: Tokens, job_id: str) -> list[tuple[Any, ...]]:
    acme = bearer(tokens.acme)
    reads = [
        (f"/v1/jobs/{job_id}", acme),
        (f"/v1/jobs/{job_id}?wait=0", acme),
        (f"/v1/jobs/{job_id}?wait=0.01&until=terminal", acme),  # queued: answered at the end
        (f"/v1/jobs/{job_id}?wait=abc", acme),
        (f"/v1/jobs/{NOBODYS}", acme),
        ("/v1/jobs/not-a-job-id", acme),
        (f"/v1/jobs/{job_id}", bearer(tokens.globex)),  # another account's: not found
        (f"/v1/jobs/{job_id}", {}),
        (f"/v1/jobs/{job_id}", bearer("ol_nobody")),
        (f"/v1/jobs/{job_id}", bearer(tokens.auditor)),
    ]
    seen: list[tuple[Any, ...]] = []
    for path, headers in reads:
        got = client.get(path, headers=headers)
        body = got.json()
        body.get("waiting", {}).pop("seconds", None)  # the clock moves between the two
        seen.append((path, got.status_code, got.headers["content-type"], body))
    body = {"tool": ECHO, "args": {"text": "x"}}
    submits: list[tuple[dict[str, str], dict[str, Any]]] = [
        (acme, {"json": body}),
        (acme, {"content": b"{", "headers": {"content-type": "application/json"}}),
        (acme, {"content": b"{}", "headers": {"content-type": "text/plain"}}),
        (acme, {"json": {"args": {}}}),
        (acme, {"json": {"tool": ECHO, "args": {"text": "x" * 300_000}}}),
        (bearer(tokens.auditor), {"json": body}),
        ({}, {"json": body}),
    ]
    for headers, request in submits:
        extra = request.pop("headers", {})
        got = client.post("/v1/jobs", headers={**headers, **extra}, **request)
        answer = got.json()
        for key in ("job_id", "poll_url"):  # a new job each time
            answer.pop(key, None)
        location = got.headers.get("location", "")
        seen.append(
            (got.status_code, got.headers["content-type"], answer, location.count("/v1/jobs/"))
        )
    return seen


def test_the_fast_path_answers_as_the_framework_does(
    client: TestClient, framework_only: TestClient, tokens: Tokens
) -> None:
    job_id = new_job(client, tokens.acme)
    assert client.app.state.api.outbox.flush()  # type: ignore[attr-defined]  # confirmed
    assert answers(client, tokens, job_id) == answers(framework_only, tokens, job_id)


def test_the_agents_calls_never_enter_the_framework(client: TestClient, tokens: Tokens) -> None:
    app = client.app
    client.get("/health")  # the framework builds its stack on its first request
    entered: list[str] = []
    stack = app.middleware_stack  # type: ignore[attr-defined]

    async def counting(scope: Any, receive: Any, send: Any) -> None:
        entered.append(scope["path"])
        await stack(scope, receive, send)

    app.middleware_stack = counting  # type: ignore[attr-defined]
    job_id = new_job(client, tokens.acme)
    assert client.get(f"/v1/jobs/{job_id}?wait=0.01&until=terminal", headers=bearer(tokens.acme))
    assert entered == []
    client.get(f"/v1/jobs/{job_id}/events", headers=bearer(tokens.acme))
    assert entered == [f"/v1/jobs/{job_id}/events"]

"""Tokens: who may call what, and no token value ever leaves in an answer or a log line."""

from __future__ import annotations

import logging
import uuid
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import event

from ledger.persistence.sql_store import SqlStore
from ledger.runtime.ledger import Ledger
from ledger.services.tokens import create as create_token
from ledger.services.tokens import revoke as revoke_token
from tests.plugins.api import Tokens, bearer
from tests.store_helpers import settled_head
from tests.tools import ECHO

AUDITOR_ONLY = ("/v1/audit/events", "/v1/audit/summary", "/v1/brakes")


INVALID_TOKEN = 'Bearer error="invalid_token"'


def assert_401(response: Any, challenge: str = INVALID_TOKEN) -> None:
    """A 401; by default for a token presented and refused: RFC 6750's `invalid_token`, so a
    client (the MCP Inspector) stops there instead of discovering OAuth."""
    assert response.status_code == 401, response.text
    assert response.headers["content-type"] == "application/problem+json"
    assert response.headers["www-authenticate"] == challenge
    assert response.json()["error"]["code"] == "ACCESS_DENIED"


@pytest.mark.parametrize(
    ("headers", "challenge"),
    [
        ({}, "Bearer"),
        ({"Authorization": "Bearer"}, "Bearer"),
        ({"Authorization": "Bearer ol_not-a-real-token"}, INVALID_TOKEN),
        ({"Authorization": "Basic dXNlcjpwYXNz"}, "Bearer"),
    ],
)
def test_missing_or_unknown_token_is_401(
    client: TestClient, headers: dict[str, str], challenge: str
) -> None:
    """No token: the bare challenge (RFC 6750 §3.1: no error code); a wrong one:
    `error="invalid_token"`."""
    assert_401(client.get("/v1/jobs", headers=headers), challenge)
    assert_401(client.get(f"/v1/jobs/{uuid.uuid4()}", headers=headers), challenge)
    assert_401(client.post("/v1/jobs", json={"tool": ECHO, "args": {}}, headers=headers), challenge)


def test_revoked_token_is_401_everywhere(
    client: TestClient, tokens: Tokens, store: SqlStore
) -> None:
    response = client.post(
        "/v1/jobs", json={"tool": ECHO, "args": {"text": "x"}}, headers=bearer(tokens.acme)
    )
    job_id = response.json()["job_id"]
    assert client.get(f"/v1/jobs/{job_id}", headers=bearer(tokens.acme)).status_code == 200
    revoke_token(Ledger(store), tokens.acme_id, actor="tests")
    assert_401(client.get(f"/v1/jobs/{job_id}", headers=bearer(tokens.acme)))
    assert_401(client.get(f"/v1/jobs/{job_id}?wait=1", headers=bearer(tokens.acme)))
    assert_401(client.get("/v1/jobs", headers=bearer(tokens.acme)))
    assert_401(
        client.post("/v1/jobs", json={"tool": ECHO, "args": {}}, headers=bearer(tokens.acme))
    )


def test_a_submit_reads_no_token_yet_the_next_one_after_a_revocation_is_401(
    client: TestClient, tokens: Tokens, store: SqlStore
) -> None:
    """A process that admitted a token submits without reading it again; the decision's own
    append re-checks it, so a revocation by another process stops the very next submit, and
    nothing is recorded for it."""
    body = {"tool": ECHO, "args": {"text": "x"}}
    assert client.post("/v1/jobs", json=body, headers=bearer(tokens.acme)).status_code == 202
    statements: list[str] = []

    def seen(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        statements.append(statement)

    event.listen(store.engine, "before_cursor_execute", seen)
    try:
        submitted = client.post("/v1/jobs", json=body, headers=bearer(tokens.acme))
        by_submit = list(statements)
        # A listing checks its token at the ledger, and this listener sees that it does.
        client.get("/v1/jobs", headers=bearer(tokens.acme))
    finally:
        event.remove(store.engine, "before_cursor_execute", seen)
    assert submitted.status_code == 202
    assert [s for s in statements if "token_hash" in s], statements
    assert not [s for s in by_submit if "token_hash" in s], by_submit
    revoke_token(Ledger(store), tokens.acme_id, actor="another process")
    before = settled_head(store)
    assert_401(client.post("/v1/jobs", json=body, headers=bearer(tokens.acme)))
    assert_401(client.post("/v1/jobs", json={"tool": ECHO}, headers=bearer(tokens.acme)))
    assert_401(client.post("/v1/jobs", content=b"{", headers=bearer(tokens.acme)))
    assert settled_head(store) == before  # no decision, no refusal recorded


def test_an_agent_token_for_every_account_is_401_everywhere(
    client: TestClient, tokens: Tokens
) -> None:
    job_id = client.post(
        "/v1/jobs", json={"tool": ECHO, "args": {"text": "x"}}, headers=bearer(tokens.acme)
    ).json()["job_id"]
    agent = bearer(tokens.everyone_agent)  # recorded by an older release; it would read all
    assert_401(client.get("/v1/jobs", headers=agent))
    assert_401(client.get(f"/v1/jobs/{job_id}", headers=agent))
    assert_401(client.get(f"/v1/jobs/{job_id}/events", headers=agent))
    assert_401(client.post("/v1/jobs", json={"tool": ECHO, "args": {"text": "x"}}, headers=agent))
    for path in AUDITOR_ONLY:
        assert_401(client.get(path, headers=agent))


@pytest.mark.parametrize("path", AUDITOR_ONLY)
def test_agent_tokens_on_auditor_endpoints_are_403(
    client: TestClient, tokens: Tokens, path: str
) -> None:
    for token in (tokens.acme,):
        response = client.get(path, headers=bearer(token))
        assert response.status_code == 403
        assert response.headers["content-type"] == "application/problem+json"
        assert response.json()["error"]["code"] == "ACCESS_DENIED"
    for token in (tokens.auditor, tokens.operator, tokens.acme_auditor):
        assert client.get(path, headers=bearer(token)).status_code == 200


def test_no_token_value_appears_in_any_answer_or_log_line(
    client: TestClient, tokens: Tokens, store: SqlStore, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    revoked = create_token(Ledger(store), "acme", "agent", None, actor="tests")
    revoke_token(Ledger(store), revoked.view.token_id, actor="tests")
    secrets = [
        tokens.acme,
        tokens.globex,
        tokens.auditor,
        tokens.operator,
        revoked.token,
        "ol_made-up-secret-value",
    ]
    answers: list[Any] = []
    for secret in secrets:
        auth = bearer(secret)
        job = client.post("/v1/jobs", json={"tool": ECHO, "args": {"text": "x"}}, headers=auth)
        answers.append(job)
        job_id = job.json().get("job_id") or str(uuid.uuid4())
        answers += [
            client.post("/v1/jobs", json={"tool": "nowhere.tool", "args": {}}, headers=auth),
            client.post("/v1/jobs", content=b"{", headers=auth),
            client.get(f"/v1/jobs/{job_id}", headers=auth),
            client.get(f"/v1/jobs/{job_id}/events", headers=auth),
            client.get("/v1/jobs", headers=auth),
            client.get("/v1/audit/events?limit=1000", headers=auth),
            client.get("/v1/audit/summary", headers=auth),
            client.get("/v1/brakes", headers=auth),
            client.get("/v1/nowhere", headers=auth),
        ]
    texts = [a.text + str(a.headers) for a in answers] + [caplog.text]
    texts += [record.getMessage() for record in caplog.records]
    for secret in secrets:
        assert not any(secret in text for text in texts)

"""`POST /v1/jobs/{id}/cancel` over a real ledger (SQLite and Postgres): a queued job ends
declined and never starts; a running one is a 409 carrying its envelope and goes on to its
outcome; a second cancel answers as the first; roles and accounts as `GET /v1/jobs/{id}`."""

from __future__ import annotations

import uuid

import pytest
from fastapi.testclient import TestClient

from ledger.events import job_stream
from ledger.persistence.sql_store import SqlStore
from ledger.runtime.ledger import Ledger
from ledger.services.tokens import create as create_token
from ledger.services.work import ClaimResult, claim
from tests.factories import succeeded
from tests.plugins.api import Tokens, bearer, new_job


def test_a_queued_job_is_cancelled_once_and_never_starts(
    client: TestClient, tokens: Tokens, store: SqlStore
) -> None:
    job_id = new_job(client, tokens.acme)
    first = client.post(
        f"/v1/jobs/{job_id}/cancel", json={"reason": "plan changed"}, headers=bearer(tokens.acme)
    )
    assert first.status_code == 200, first.text
    body = first.json()
    assert (body["status"], body["terminal"], body["next_action"], body["recorded_by"]) == (
        "declined",
        True,
        "accept",
        "api",
    )
    assert body["declined_reason"] == (
        "Cancelled by an agent token of account acme before any worker started it: plan "
        "changed. Nothing ran."
    )
    assert client.get(f"/v1/jobs/{job_id}", headers=bearer(tokens.acme)).json() == body
    # Idempotent: the same answer, whoever asks again (no body this time), nothing recorded.
    for token in (tokens.acme, tokens.operator):
        again = client.post(f"/v1/jobs/{job_id}/cancel", headers=bearer(token))
        assert (again.status_code, again.json()) == (200, body)
    events = client.get(f"/v1/jobs/{job_id}/events", headers=bearer(tokens.acme)).json()
    assert [e["type"] for e in events["events"]] == ["job.accepted", "work.declined"]
    assert events["events"][1]["data"]["cancelled"] == {
        "account": "acme",
        "role": "agent",
        "reason": "plan changed",
    }
    assert claim(Ledger(store), job_id, "w-1", 30).result is ClaimResult.SKIPPED


def test_a_running_job_is_a_409_with_its_envelope_and_goes_on(
    client: TestClient, tokens: Tokens, store: SqlStore
) -> None:
    job_id = new_job(client, tokens.acme)
    claimed = claim(Ledger(store), job_id, "w-1", 30)
    answer = client.post(f"/v1/jobs/{job_id}/cancel", headers=bearer(tokens.acme))
    assert answer.status_code == 409
    assert answer.headers["content-type"] == "application/problem+json"
    problem = answer.json()
    assert problem["type"] == "urn:outcome-ledger:problem:not-cancellable"
    assert (problem["error"]["code"], problem["error"]["cause"], problem["job_id"]) == (
        "NOT_CANCELLABLE",
        "running",
        None,
    )
    assert problem["detail"] == problem["error"]["message"]
    assert (problem["job"]["job_id"], problem["job"]["status"]) == (job_id, "running")
    assert problem["error"]["fix"].startswith(
        f"wait for its outcome (GET /v1/jobs/{job_id}?wait=60&until=terminal)"
    )
    store.append(job_stream(job_id), [succeeded(text="x")], claimed.version)
    done = client.get(f"/v1/jobs/{job_id}", headers=bearer(tokens.acme)).json()
    assert (done["status"], done["result"]) == ("succeeded", {"text": "x"})
    ended = client.post(f"/v1/jobs/{job_id}/cancel", headers=bearer(tokens.acme))
    assert (ended.status_code, ended.json()["job"]) == (409, done)
    # Waiting is no use for an ended job: the fix says to read the outcome it has.
    assert ended.json()["error"]["fix"] == (
        f"it has already ended (succeeded): read its outcome (GET /v1/jobs/{job_id}) and act on "
        "its next_action; a cancel cannot undo it"
    )


def test_unknown_and_foreign_ids_get_the_same_404_as_a_read(
    client: TestClient, tokens: Tokens
) -> None:
    theirs = new_job(client, tokens.globex)
    read = client.get(f"/v1/jobs/{uuid.uuid4()}", headers=bearer(tokens.acme))
    answers = [
        client.post(f"/v1/jobs/{job_id}/cancel", headers=bearer(tokens.acme))
        for job_id in (theirs, str(uuid.uuid4()), "not-a-uuid")
    ]
    assert {(a.status_code, a.content) for a in answers} == {(404, read.content)}
    assert client.get(f"/v1/jobs/{theirs}", headers=bearer(tokens.globex)).json()["status"] == (
        "queued"
    )


def test_roles_agents_of_the_account_and_operators_who_cover_it(
    client: TestClient, tokens: Tokens, store: SqlStore
) -> None:
    job_id = new_job(client, tokens.acme)
    for auditor in (tokens.auditor, tokens.acme_auditor):
        denied = client.post(f"/v1/jobs/{job_id}/cancel", headers=bearer(auditor))
        assert (denied.status_code, denied.json()["error"]["code"]) == (403, "ACCESS_DENIED")
    assert client.post(f"/v1/jobs/{job_id}/cancel").status_code == 401
    globex_operator = create_token(Ledger(store), "globex", "operator", None, actor="tests").token
    refused = client.post(f"/v1/jobs/{job_id}/cancel", headers=bearer(globex_operator))
    assert refused.status_code == 404
    acme_operator = create_token(Ledger(store), "acme", "operator", None, actor="tests").token
    done = client.post(f"/v1/jobs/{job_id}/cancel", headers=bearer(acme_operator))
    assert done.status_code == 200
    assert done.json()["declined_reason"].startswith(
        "Cancelled by an operator token of account acme"
    )
    other = new_job(client, tokens.acme)
    by_all = client.post(f"/v1/jobs/{other}/cancel", headers=bearer(tokens.operator)).json()
    assert by_all["declined_reason"].startswith("Cancelled by an operator token of every account")


@pytest.mark.parametrize("reason", ["x" * 501, "two\nlines", "flip\u202eit"])
def test_a_reason_that_cannot_be_recorded_is_a_422_and_changes_nothing(
    client: TestClient, tokens: Tokens, reason: str
) -> None:
    job_id = new_job(client, tokens.acme)
    answer = client.post(
        f"/v1/jobs/{job_id}/cancel", json={"reason": reason}, headers=bearer(tokens.acme)
    )
    assert (answer.status_code, answer.json()["error"]["code"]) == (422, "INPUT_INVALID")
    assert client.get(f"/v1/jobs/{job_id}", headers=bearer(tokens.acme)).json()["status"] == (
        "queued"
    )


def test_the_route_is_documented(client: TestClient) -> None:
    operation = client.get("/openapi.json").json()["paths"]["/v1/jobs/{job_id}/cancel"]["post"]
    conflict = operation["responses"]["409"]["content"]["application/problem+json"]["schema"]
    assert conflict == {"$ref": "#/components/schemas/NotCancellableProblem"}
    assert operation["responses"]["200"]["content"]["application/json"]["schema"] == {
        "$ref": "#/components/schemas/JobEnvelope"
    }
    assert {"401", "403", "404", "409", "422", "503"} <= set(operation["responses"])


@pytest.mark.parametrize(
    ("content_type", "content", "status"),
    [
        ("application/json", b"{nope", 400),
        ("text/plain", b"why", 415),
        ("application/json", b"[]", 422),
    ],
)
def test_a_body_is_json_as_for_a_submit(
    client: TestClient, tokens: Tokens, content_type: str, content: bytes, status: int
) -> None:
    job_id = new_job(client, tokens.acme)
    headers = bearer(tokens.acme) | {"content-type": content_type}
    answer = client.post(f"/v1/jobs/{job_id}/cancel", content=content, headers=headers)
    assert answer.status_code == status
    assert answer.headers["content-type"] == "application/problem+json"
    assert client.get(f"/v1/jobs/{job_id}", headers=bearer(tokens.acme)).json()["status"] == (
        "queued"
    )

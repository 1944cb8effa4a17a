"""Reading outcomes: the envelope, events and change lists — never another account's."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from fastapi.testclient import TestClient

from api import pages
from ledger.codes import Code
from ledger.error_info import ErrorInfo
from ledger.events import NewEvent, WorkFailed, job_stream
from ledger.persistence.sql_store import SqlStore
from tests.factories import started, succeeded
from tests.plugins.api import Tokens, bearer, new_job

ENVELOPE_KEYS = {
    "job_id",
    "account",
    "tool",
    "status",
    "terminal",
    "attempts",
    "next_action",
    "result",
    "declined_reason",
    "partial",
    "error",
    "recorded_by",
    "created_at",
    "updated_at",
    "budget",
    "approval",
}


def test_envelope_carries_every_contract_field(
    client: TestClient, tokens: Tokens, store: SqlStore
) -> None:
    job_id = new_job(client, tokens.acme)
    store.append(job_stream(job_id), [started(), succeeded(text="x")])
    response = client.get(f"/v1/jobs/{job_id}", headers=bearer(tokens.acme))
    assert response.status_code == 200
    body = response.json()
    # Not the global ledger_position; `waiting` is null once the job no longer waits.
    assert set(body) == ENVELOPE_KEYS | {"late_outcomes", "waiting"}
    assert body["waiting"] is None
    assert body["status"] == "succeeded" and body["terminal"] is True
    assert (body["next_action"], body["result"], body["error"]) == ("accept", {"text": "x"}, None)
    assert (body["attempts"], body["recorded_by"]) == (1, "worker")


def test_unknown_and_foreign_ids_get_the_identical_404(client: TestClient, tokens: Tokens) -> None:
    theirs = new_job(client, tokens.globex)
    answers = [
        client.get(f"/v1/jobs/{job_id}", headers=bearer(tokens.acme))
        for job_id in (theirs, str(uuid.uuid4()), "not-a-uuid")
    ]
    answers += [
        client.get(f"/v1/jobs/{job_id}/events", headers=bearer(tokens.acme))
        for job_id in (theirs, str(uuid.uuid4()))
    ]
    answers.append(client.get(f"/v1/jobs/{theirs}?wait=0.2", headers=bearer(tokens.acme)))
    assert {a.status_code for a in answers} == {404}
    assert len({a.content for a in answers}) == 1  # byte for byte the same
    assert answers[0].headers["content-type"] == "application/problem+json"
    assert answers[0].json()["error"]["code"] == "REFERENCE_UNRESOLVED"
    assert answers[0].json()["job_id"] is None
    # The owner and a token for every account do see it.
    for token in (tokens.globex, tokens.auditor):
        assert client.get(f"/v1/jobs/{theirs}", headers=bearer(token)).status_code == 200


def test_lists_never_show_another_accounts_rows(client: TestClient, tokens: Tokens) -> None:
    mine = {new_job(client, tokens.acme) for _ in range(3)}
    theirs = {new_job(client, tokens.globex) for _ in range(2)}

    def listed(token: str) -> set[str]:
        page = client.get("/v1/jobs?limit=1000", headers=bearer(token)).json()
        return {item["job_id"] for item in page["items"]}

    assert listed(tokens.acme) == mine
    assert listed(tokens.globex) == theirs
    assert listed(tokens.auditor) == mine | theirs  # scoped to '*'
    assert listed(tokens.acme_auditor) == mine


def test_changes_page_by_cursor_and_say_when_truncated(
    client: TestClient, tokens: Tokens, store: SqlStore
) -> None:
    jobs = [new_job(client, tokens.acme, str(n)) for n in range(5)]
    first = client.get("/v1/jobs?limit=2", headers=bearer(tokens.acme)).json()
    assert (first["count"], first["truncated"]) == (2, True)
    assert [i["job_id"] for i in first["items"]] == jobs[:2]
    # Opaque: not a position (the ledger's volume), and a new one each time it is issued.
    assert isinstance(first["next_cursor"], str) and not first["next_cursor"].isdigit()
    again = client.get("/v1/jobs?limit=2", headers=bearer(tokens.acme)).json()
    assert again["next_cursor"] != first["next_cursor"] and again["items"] == first["items"]
    rest = client.get(f"/v1/jobs?after={first['next_cursor']}", headers=bearer(tokens.acme)).json()
    assert [i["job_id"] for i in rest["items"]] == jobs[2:]
    assert rest["truncated"] is False
    # A job that changes later shows up again after the cursor: the list is of changes.
    store.append(job_stream(jobs[0]), [started()])
    delta = client.get(f"/v1/jobs?after={rest['next_cursor']}", headers=bearer(tokens.acme)).json()
    assert [(i["job_id"], i["status"]) for i in delta["items"]] == [(jobs[0], "running")]
    empty = client.get(f"/v1/jobs?after={delta['next_cursor']}", headers=bearer(tokens.acme)).json()
    assert empty == {
        "items": [],
        "next_cursor": delta["next_cursor"],
        "count": 0,
        "truncated": False,
    }


def test_a_cursor_this_api_did_not_issue_is_refused(client: TestClient, tokens: Tokens) -> None:
    new_job(client, tokens.acme)
    issued = client.get("/v1/jobs?limit=1", headers=bearer(tokens.acme)).json()["next_cursor"]
    altered = issued[:-2] + ("AA" if issued[-2:] != "AA" else "BB")
    for cursor in ("0", "12345", altered):  # a bare position is not a cursor any more
        response = client.get(f"/v1/jobs?after={cursor}", headers=bearer(tokens.acme))
        assert response.status_code == 422, cursor
        assert response.json()["error"]["code"] == "INPUT_INVALID"


def test_the_byte_budget_truncates_a_page_and_says_so(
    client: TestClient, tokens: Tokens, monkeypatch: pytest.MonkeyPatch
) -> None:
    jobs = [new_job(client, tokens.acme, "y" * 400) for _ in range(3)]
    monkeypatch.setattr(pages, "PAGE_BUDGET_BYTES", 900)
    page = client.get("/v1/jobs?limit=10", headers=bearer(tokens.acme)).json()
    assert 1 <= page["count"] < 3 and page["truncated"] is True
    seen = [i["job_id"] for i in page["items"]]
    while page["truncated"]:  # following the cursor yields every job, each once
        page = client.get(f"/v1/jobs?after={page['next_cursor']}", headers=bearer(tokens.acme))
        page = page.json()
        seen += [i["job_id"] for i in page["items"]]
    assert seen == jobs


def test_job_events_hide_raw_failure_detail_from_agents(
    client: TestClient, tokens: Tokens, store: SqlStore
) -> None:
    job_id = new_job(client, tokens.acme)
    error = ErrorInfo(code=Code.SOURCE_UNRELIABLE, dependency="tracker", message="Timed out.")
    failed = WorkFailed(attempt=1, error=error, detail="raw provider text")
    store.append(job_stream(job_id), [started(), NewEvent(payload=failed, actor="worker:w-1")])

    def events(token: str) -> list[dict[str, Any]]:
        response = client.get(f"/v1/jobs/{job_id}/events", headers=bearer(token))
        assert response.status_code == 200
        assert response.json()["job_id"] == job_id
        found: list[dict[str, Any]] = response.json()["events"]
        return found

    seen = events(tokens.acme)
    assert [e["type"] for e in seen] == ["job.accepted", "work.started", "work.failed"]
    assert set(seen[0]) == {"stream_version", "type", "code", "recorded_at", "data"}
    assert seen[2]["code"] == "SOURCE_UNRELIABLE"
    assert "detail" not in seen[2]["data"] and "worker" not in seen[1]["data"]
    for staff in (tokens.auditor, tokens.operator):
        shown = events(staff)
        assert shown[2]["data"]["detail"] == "raw provider text"
        assert "worker" in shown[1]["data"] and isinstance(shown[0]["position"], int)

"""Auditors' and operators' reads: filtered event pages, the summary and the brakes' queues."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from fastapi.testclient import TestClient

from ledger.events import job_stream
from ledger.persistence.sql_store import SqlStore
from ledger.runtime.ledger import Ledger
from ledger.services.brakes import pull, release
from tests.factories import started
from tests.plugins.api import Tokens, bearer, new_job
from tests.tools import ECHO, METERED


def audit(client: TestClient, token: str, query: str = "") -> dict[str, Any]:
    response = client.get(f"/v1/audit/events?{query}", headers=bearer(token))
    assert response.status_code == 200, response.text
    page: dict[str, Any] = response.json()
    assert set(page) == {"items", "next_cursor", "count", "truncated"}
    return page


def test_audit_events_filter_and_page(client: TestClient, tokens: Tokens, store: SqlStore) -> None:
    acme_job = new_job(client, tokens.acme)
    globex_job = new_job(client, tokens.globex)
    client.post("/v1/jobs", json={"tool": "nowhere.tool", "args": {}}, headers=bearer(tokens.acme))
    store.append(job_stream(acme_job), [started()])

    everything = audit(client, tokens.auditor, "limit=1000")
    types = [e["type"] for e in everything["items"]]
    assert "token.created" in types and "job.accepted" in types
    positions = [e["position"] for e in everything["items"]]
    assert positions == sorted(positions)

    streams = {e["stream_id"] for e in audit(client, tokens.auditor, "account=globex")["items"]}
    assert streams == {job_stream(globex_job)}
    refused = audit(client, tokens.auditor, "code=CAPABILITY_UNAVAILABLE")["items"]
    assert [(e["type"], e["code"]) for e in refused] == [("job.refused", "CAPABILITY_UNAVAILABLE")]
    started_events = audit(client, tokens.auditor, "type=work.started&tool=" + ECHO)["items"]
    assert [e["stream_id"] for e in started_events] == [job_stream(acme_job)]

    future = (datetime.now(UTC) + timedelta(hours=1)).isoformat().replace("+00:00", "Z")
    assert audit(client, tokens.auditor, f"since={future}")["count"] == 0
    assert audit(client, tokens.auditor, f"until={future}")["count"] == len(positions)

    first = audit(client, tokens.auditor, "limit=2")
    assert (first["count"], first["truncated"]) == (2, True)
    rest = audit(client, tokens.auditor, f"after={first['next_cursor']}&limit=1000")
    assert [e["position"] for e in first["items"] + rest["items"]] == positions


def test_audit_of_one_account_never_shows_another(client: TestClient, tokens: Tokens) -> None:
    acme_job = new_job(client, tokens.acme)
    new_job(client, tokens.globex)
    streams = {e["stream_id"] for e in audit(client, tokens.acme_auditor, "limit=1000")["items"]}
    assert streams == {job_stream(acme_job)}  # no other account's, no token or brake streams
    assert audit(client, tokens.acme_auditor, "account=globex")["count"] == 0
    summary = client.get("/v1/audit/summary", headers=bearer(tokens.acme_auditor)).json()
    assert summary["by_account"] == {"acme": 1}


def test_token_hashes_never_leave_through_the_audit_log(client: TestClient, tokens: Tokens) -> None:
    created = audit(client, tokens.auditor, "type=token.created&limit=1000")["items"]
    assert created and all(e["data"]["token_hash"] == "(redacted)" for e in created)


def test_summary_counts_jobs_by_status_code_tool_and_account(
    client: TestClient, tokens: Tokens
) -> None:
    new_job(client, tokens.acme)
    new_job(client, tokens.globex)
    client.post("/v1/jobs", json={"tool": ECHO, "args": {}}, headers=bearer(tokens.acme))
    response = client.get("/v1/audit/summary", headers=bearer(tokens.operator))
    assert response.status_code == 200
    assert response.json() == {
        "jobs": 3,
        "by_status": {"queued": 2, "refused": 1},
        "by_code": {"INPUT_MISSING": 1},
        "by_tool": {ECHO: 3},
        "by_account": {"acme": 2, "globex": 1},
    }
    only = client.get("/v1/audit/summary?account=globex", headers=bearer(tokens.auditor)).json()
    assert only["jobs"] == 1


def test_brakes_list_holds_and_counts_the_jobs_they_keep_waiting(
    client: TestClient, tokens: Tokens, store: SqlStore
) -> None:
    new_job(client, tokens.acme)
    new_job(client, tokens.globex)
    client.post(
        "/v1/jobs", json={"tool": METERED, "args": {"text": "x"}}, headers=bearer(tokens.acme)
    )
    everywhere = pull(Ledger(store), "global", "incident 7", "ops-1")
    on_echo = pull(Ledger(store), f"tool:{ECHO}", "provider outage", "ops-2")
    on_globex = pull(Ledger(store), "account:globex", "billing", "ops-3")
    released = pull(Ledger(store), "global", "drill", "ops-1")
    release(Ledger(store), released.brake_id, "drill over", "ops-1")

    listed = client.get("/v1/brakes", headers=bearer(tokens.operator)).json()["brakes"]
    assert [(b["brake_id"], b["queued_jobs"]) for b in listed] == [
        (everywhere.brake_id, 3),
        (on_echo.brake_id, 2),
        (on_globex.brake_id, 1),
    ]
    assert set(listed[0]) == {"brake_id", "scope", "reason", "operator", "pulled_at", "queued_jobs"}
    assert (listed[0]["scope"], listed[0]["reason"], listed[0]["operator"]) == (
        "global",
        "incident 7",
        "ops-1",
    )
    # One account's auditor: no other account's brake, and only its own jobs counted.
    mine = client.get("/v1/brakes", headers=bearer(tokens.acme_auditor)).json()["brakes"]
    assert [(b["brake_id"], b["queued_jobs"]) for b in mine] == [
        (everywhere.brake_id, 2),
        (on_echo.brake_id, 1),
    ]


def test_only_auditors_see_the_hashes_and_staff_see_what_was_asked(
    client: TestClient, tokens: Tokens
) -> None:
    """The hashes are the auditors'. What was asked is everyone's who reads the job: a
    non-secret argument's value on every page, a declared secret as `(secret)` (it is stored
    sealed under a random nonce, so no hash lets anyone test guesses of it)."""
    asked = client.post(
        "/v1/jobs", json={"tool": ECHO, "args": {"text": "T-4821"}}, headers=bearer(tokens.acme)
    )
    secret = client.post(
        "/v1/jobs",
        json={"tool": "canary.crash", "args": {"secret": "pin-4821"}},
        headers=bearer(tokens.acme),
    )
    assert (asked.status_code, secret.status_code) == (202, 202)
    for_auditor = audit(client, tokens.auditor, "limit=1000")["items"]
    for_operator = audit(client, tokens.operator, "limit=1000")["items"]
    assert [e["position"] for e in for_auditor] == [e["position"] for e in for_operator]
    assert all(isinstance(e["hash"], str) and "prev_hash" in e for e in for_auditor)
    assert not [e for e in for_operator if {"hash", "prev_hash"} & set(e)]
    for items in (for_auditor, for_operator):
        decisions = {e["data"]["tool"]: e["data"] for e in items if e["type"] == "job.accepted"}
        assert decisions[ECHO]["args"] == {"text": "T-4821"}
        assert decisions["canary.crash"]["args"] == {"secret": "(secret)"}
        assert decisions["canary.crash"]["secret_paths"] == ["/secret"]
    # The whole value: "4821" alone turns up in hex hashes and ids by chance.
    assert "pin-4821" not in secret.text + str(for_operator) + str(for_auditor)

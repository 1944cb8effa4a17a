"""People in the loop over HTTP (docs/approvals.md), on SQLite and Postgres: a parked call
answers 202 `awaiting_approval` and is not published; approvers and operators list and decide
it; agents and auditors cannot (403); a second decision is a 409 carrying the first; the
decision is an event naming the deciding token and its reason; the catalog says which tools
ask for approval."""

from __future__ import annotations

from fastapi.testclient import TestClient

from ledger.persistence.sql_store import SqlStore
from ledger.runtime.ledger import Ledger
from ledger.services.tokens import create as create_token
from tests.api.test_metrics import scrape
from tests.plugins.api import RecordingDispatcher, Tokens, bearer, published
from tests.tools import APPROVED_CHARGE, APPROVED_METERED, ECHO, LARGE_CHARGE, LOOKUP


def approver(store: SqlStore, account: str = "acme") -> tuple[str, str]:
    issued = create_token(Ledger(store), account, "approver", None, actor="tests")
    return issued.token, issued.view.token_id


def park(client: TestClient, token: str, tool: str = APPROVED_CHARGE, amount: int = 7) -> str:
    answer = client.post(
        "/v1/jobs", json={"tool": tool, "args": {"amount": amount}}, headers=bearer(token)
    )
    assert answer.status_code == 202, answer.text
    assert answer.json()["status"] == "awaiting_approval"
    job_id: str = answer.json()["job_id"]
    return job_id


def test_park_list_approve_and_the_decision_event(
    client: TestClient, tokens: Tokens, store: SqlStore, dispatcher: RecordingDispatcher
) -> None:
    job_id = park(client, tokens.acme)
    shown = client.get(f"/v1/jobs/{job_id}", headers=bearer(tokens.acme)).json()
    assert (shown["status"], shown["terminal"], shown["next_action"]) == (
        "awaiting_approval",
        False,
        "wait",
    )
    approval = shown["approval"]
    assert set(approval) >= {
        "reason",
        "requested_at",
        "expires_at",
        "decided_by",
        "decided_at",
        "decision_reason",
    }
    assert approval["decided_by"] is None
    assert published(client, dispatcher) == []

    acme_approver, approver_id = approver(store)
    listed = client.get("/v1/approvals", headers=bearer(acme_approver))
    assert listed.status_code == 200, listed.text
    assert [j["job_id"] for j in listed.json()["items"]] == [job_id]
    by_tool = client.get(f"/v1/approvals?tool={ECHO}", headers=bearer(tokens.operator)).json()
    assert by_tool["items"] == []
    other, _ = approver(store, "globex")
    assert client.get("/v1/approvals", headers=bearer(other)).json()["items"] == []
    # Another account's parked call is as unknown to it as a job that does not exist.
    nope = client.post(f"/v1/jobs/{job_id}/approve", json={"reason": "x"}, headers=bearer(other))
    assert nope.status_code == 404

    for token in (tokens.acme, tokens.auditor):
        denied = client.get("/v1/approvals", headers=bearer(token))
        assert denied.status_code == 403
        tried = client.post(
            f"/v1/jobs/{job_id}/approve", json={"reason": "me"}, headers=bearer(token)
        )
        assert tried.status_code == 403, tried.text
        assert tried.json()["error"]["code"] == "ACCESS_DENIED"
    no_reason = client.post(f"/v1/jobs/{job_id}/approve", json={}, headers=bearer(acme_approver))
    assert no_reason.status_code == 422

    approved = client.post(
        f"/v1/jobs/{job_id}/approve", json={"reason": "checked"}, headers=bearer(acme_approver)
    )
    assert approved.status_code == 200, approved.text
    body = approved.json()
    assert body["status"] == "queued"
    assert (body["approval"]["decided_by"], body["approval"]["decision_reason"]) == (
        approver_id,
        "checked",
    )
    assert published(client, dispatcher) == [job_id]

    again = client.post(
        f"/v1/jobs/{job_id}/deny", json={"reason": "no"}, headers=bearer(tokens.operator)
    )
    assert again.status_code == 409, again.text
    problem = again.json()
    assert problem["error"]["code"] == "NOT_DECIDABLE"
    assert problem["error"]["cause"] == "approved"
    assert problem["job"]["approval"]["decision_reason"] == "checked"

    events = client.get(f"/v1/jobs/{job_id}/events", headers=bearer(tokens.acme)).json()
    decided = events["events"][1]
    assert decided["type"] == "job.approval_decided"
    assert decided["data"]["token_id"] == approver_id
    assert decided["data"]["reason"] == "checked"


def test_deny_ends_refused_access_denied(client: TestClient, tokens: Tokens) -> None:
    job_id = park(client, tokens.acme)
    denied = client.post(
        f"/v1/jobs/{job_id}/deny", json={"reason": "wrong card"}, headers=bearer(tokens.operator)
    )
    assert denied.status_code == 200, denied.text
    body = denied.json()
    assert (body["status"], body["terminal"], body["next_action"]) == (
        "refused",
        True,
        "satisfy_precondition",
    )
    assert (body["error"]["code"], body["error"]["cause"]) == ("ACCESS_DENIED", "approval_denied")
    assert "wrong card" in body["error"]["message"]
    assert body["approval"]["decision"] == "denied"


def test_over_quota_is_refused_never_parked(client: TestClient, tokens: Tokens) -> None:
    park(client, tokens.acme, APPROVED_METERED)
    refused = client.post(
        "/v1/jobs", json={"tool": APPROVED_METERED, "args": {}}, headers=bearer(tokens.acme)
    )
    assert refused.status_code == 429, refused.text
    operator = client.get("/v1/approvals", headers=bearer(tokens.operator)).json()
    assert [j["tool"] for j in operator["items"]] == [APPROVED_METERED]


def test_the_catalog_says_who_approves(client: TestClient, tokens: Tokens) -> None:
    listed = client.get("/v1/tools", headers=bearer(tokens.acme)).json()["tools"]
    by_name = {tool["name"]: tool for tool in listed}
    assert by_name[APPROVED_CHARGE]["approval"] == "always"
    assert by_name[APPROVED_CHARGE]["approval_expires_s"] == 3600
    assert by_name[LARGE_CHARGE]["approval"] == "conditional"
    assert by_name[ECHO]["approval"] is None
    assert by_name[LOOKUP]["read_only"] is True and by_name[ECHO]["read_only"] is False


def test_metrics_show_pending_approvals(client: TestClient, tokens: Tokens) -> None:
    before = scrape(client, tokens.operator)
    assert before[("outcomes_approvals_pending", ())] == 0
    assert before[("outcomes_approvals_oldest_seconds", ())] == 0
    park(client, tokens.acme)
    park(client, tokens.acme)
    found = scrape(client, tokens.operator)
    assert found[("outcomes_approvals_pending", ())] == 2
    assert found[("outcomes_approvals_oldest_seconds", ())] >= 0
    assert found[("outcomes_jobs_open", (("status", "awaiting_approval"),))] == 2

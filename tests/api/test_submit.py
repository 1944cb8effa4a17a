"""POST /v1/jobs: accepted or refused — and a refusal is recorded, answered with its job_id."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from fastapi.testclient import TestClient

from ledger.codes import Status
from ledger.persistence.sql_store import SqlStore
from ledger.queueing import Backlog
from ledger.runtime.ledger import Ledger
from ledger.services.brakes import pull
from tests.factories import ERROR_KEYS, get_job
from tests.plugins.api import RecordingDispatcher, Tokens, bearer, published
from tests.store_helpers import settled_head
from tests.tools import ECHO, METERED, OFF, QUOTA


def submit(client: TestClient, token: str, body: dict[str, Any]) -> Any:
    return client.post("/v1/jobs", json=body, headers=bearer(token))


def assert_refusal(response: Any, status: int, code: str, store: SqlStore) -> str:
    """A refusal answered as a problem, carrying the id of the refused job it recorded."""
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == "application/problem+json"
    problem = response.json()
    assert set(problem) == {"type", "title", "status", "detail", "job_id", "error"}
    assert set(problem["error"]) == ERROR_KEYS
    assert problem["status"] == status
    assert problem["error"]["code"] == code
    job_id: str = problem["job_id"]
    recorded = get_job(store, job_id)
    assert recorded is not None and recorded.status is Status.REFUSED
    assert recorded.code is not None and recorded.code.value == code
    return job_id


def test_accepted_job_is_queued_dispatched_and_pollable(
    client: TestClient, tokens: Tokens, dispatcher: RecordingDispatcher
) -> None:
    response = submit(client, tokens.acme, {"tool": ECHO, "args": {"text": "hi"}})
    assert response.status_code == 202
    body = response.json()
    assert set(body) == {"job_id", "status", "poll_url"}
    assert body["status"] == "queued"
    assert body["poll_url"] == f"/v1/jobs/{body['job_id']}"
    assert response.headers["location"] == body["poll_url"]
    assert published(client, dispatcher) == [body["job_id"]]
    polled = client.get(body["poll_url"], headers=bearer(tokens.acme)).json()
    assert (polled["status"], polled["attempts"], polled["next_action"]) == ("queued", 0, "wait")


@pytest.mark.parametrize(
    ("body", "status", "code"),
    [
        ({"tool": "nowhere.tool", "args": {}}, 422, "CAPABILITY_UNAVAILABLE"),
        ({"tool": OFF, "args": {"text": "x"}}, 422, "CAPABILITY_UNAVAILABLE"),
        ({"tool": ECHO, "args": {}}, 422, "INPUT_MISSING"),
        ({"tool": ECHO, "args": {"text": "x", "times": "many"}}, 422, "INPUT_INVALID"),
    ],
)
def test_refusals_are_recorded_and_answered_with_their_job_id(
    client: TestClient,
    tokens: Tokens,
    store: SqlStore,
    dispatcher: RecordingDispatcher,
    body: dict[str, Any],
    status: int,
    code: str,
) -> None:
    job_id = assert_refusal(submit(client, tokens.acme, body), status, code, store)
    envelope = client.get(f"/v1/jobs/{job_id}", headers=bearer(tokens.acme)).json()
    assert envelope["status"] == "refused"
    assert envelope["next_action"] == "satisfy_precondition"
    assert envelope["attempts"] == 0
    assert published(client, dispatcher) == []  # nothing refused is ever sent to a worker


def test_a_tool_the_token_may_not_call_is_refused_403(
    client: TestClient, tokens: Tokens, store: SqlStore
) -> None:
    assert (
        submit(client, tokens.echo_only, {"tool": ECHO, "args": {"text": "x"}}).status_code == 202
    )
    response = submit(client, tokens.echo_only, {"tool": METERED, "args": {"text": "x"}})
    assert_refusal(response, 403, "ACCESS_DENIED", store)


def test_quota_refusal_is_429_with_whole_seconds_retry_after(
    client: TestClient, tokens: Tokens, store: SqlStore
) -> None:
    for _ in range(QUOTA):
        assert (
            submit(client, tokens.acme, {"tool": METERED, "args": {"text": "x"}}).status_code == 202
        )
    response = submit(client, tokens.acme, {"tool": METERED, "args": {"text": "x"}})
    assert_refusal(response, 429, "QUOTA_EXCEEDED", store)
    retry_after = response.headers["retry-after"]
    assert retry_after.isdigit() and int(retry_after) >= 1
    assert response.json()["error"]["retry_after_s"] == int(retry_after)
    # Quotas are per account: another account still has its own.
    assert (
        submit(client, tokens.globex, {"tool": METERED, "args": {"text": "x"}}).status_code == 202
    )


def test_brake_refusal_is_409_naming_the_brake(
    client: TestClient, tokens: Tokens, store: SqlStore
) -> None:
    brake = pull(Ledger(store), f"tool:{ECHO}", "provider outage", "ops-1")
    response = submit(client, tokens.acme, {"tool": ECHO, "args": {"text": "x"}})
    assert_refusal(response, 409, "BRAKE_ENGAGED", store)
    assert response.json()["error"]["cause"] == brake.brake_id


def test_only_agent_tokens_of_one_account_submit(client: TestClient, tokens: Tokens) -> None:
    body = {"tool": ECHO, "args": {"text": "x"}}
    for token in (tokens.operator, tokens.auditor):
        response = submit(client, token, body)
        assert response.status_code == 403
        assert response.json()["error"]["code"] == "ACCESS_DENIED"
        assert response.json()["job_id"] is None  # nothing was recorded


def test_same_key_and_body_replays_the_first_answer(
    client: TestClient, tokens: Tokens, dispatcher: RecordingDispatcher
) -> None:
    body = {"tool": ECHO, "args": {"text": "x"}, "idempotency_key": "order-17"}
    first = submit(client, tokens.acme, body)
    again = submit(client, tokens.acme, {**body, "args": {"text": "x"}})
    assert first.status_code == again.status_code == 202
    assert first.json() == again.json()
    assert published(client, dispatcher) == [first.json()["job_id"]]  # dispatched once
    # The key is the account's: another account's same key is another job.
    other = submit(client, tokens.globex, body)
    assert other.status_code == 202 and other.json()["job_id"] != first.json()["job_id"]


def test_a_narrow_token_replaying_a_wide_tokens_key_is_403(
    client: TestClient, tokens: Tokens, dispatcher: RecordingDispatcher
) -> None:
    body = {"tool": METERED, "args": {"text": "x"}, "idempotency_key": "wide-1"}
    first = submit(client, tokens.acme, body)
    narrow = submit(client, tokens.echo_only, body)  # same account, same key, same body
    assert (first.status_code, narrow.status_code) == (202, 403)
    assert narrow.json()["error"]["code"] == "ACCESS_DENIED"
    assert narrow.json()["job_id"] not in (None, first.json()["job_id"])  # its own refusal
    assert published(client, dispatcher) == [first.json()["job_id"]]
    assert submit(client, tokens.acme, body).json() == first.json()  # still the wide one's


def test_a_replayed_refusal_is_the_same_refusal(client: TestClient, tokens: Tokens) -> None:
    body = {"tool": ECHO, "args": {}, "idempotency_key": "k-missing"}
    first, again = submit(client, tokens.acme, body), submit(client, tokens.acme, body)
    assert first.status_code == again.status_code == 422
    assert first.json()["job_id"] == again.json()["job_id"]


def test_same_key_with_another_body_is_422_and_records_nothing(
    client: TestClient, tokens: Tokens
) -> None:
    key = "order-18"
    first = submit(
        client, tokens.acme, {"tool": ECHO, "args": {"text": "a"}, "idempotency_key": key}
    )
    conflict = submit(
        client, tokens.acme, {"tool": ECHO, "args": {"text": "b"}, "idempotency_key": key}
    )
    assert conflict.status_code == 422
    assert conflict.headers["content-type"] == "application/problem+json"
    assert conflict.json()["error"]["code"] == "INPUT_INVALID"
    assert conflict.json()["job_id"] is None
    listed = client.get("/v1/jobs", headers=bearer(tokens.acme)).json()
    assert [item["job_id"] for item in listed["items"]] == [first.json()["job_id"]]


def test_twenty_concurrent_submits_with_one_key_make_one_job(
    client: TestClient, tokens: Tokens, dispatcher: RecordingDispatcher
) -> None:
    body = {"tool": ECHO, "args": {"text": "x"}, "idempotency_key": "burst-1"}
    start = threading.Barrier(20)
    answers: list[Any] = []
    lock = threading.Lock()

    def one() -> None:
        start.wait()
        response = submit(client, tokens.acme, body)
        with lock:
            answers.append(response)

    threads = [threading.Thread(target=one) for _ in range(20)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert len(answers) == 20
    assert {a.status_code for a in answers} == {202}
    assert len({a.json()["job_id"] for a in answers}) == 1
    listed = client.get("/v1/jobs", headers=bearer(tokens.acme)).json()
    assert listed["count"] == 1
    assert len(published(client, dispatcher)) == 1


def test_a_start_deadline_is_recorded_capped_and_told_while_the_job_waits(
    client: TestClient, tokens: Tokens, store: SqlStore, dispatcher: RecordingDispatcher
) -> None:
    short = submit(client, tokens.acme, {"tool": ECHO, "args": {"text": "a"}, "start_within_s": 30})
    long = submit(
        client, tokens.acme, {"tool": ECHO, "args": {"text": "b"}, "start_within_s": 86400}
    )
    assert (short.status_code, long.status_code) == (202, 202)
    published(client, dispatcher)  # the outbox has published both and recorded the confirms
    views = [get_job(store, r.json()["job_id"]) for r in (short, long)]
    assert [v.start_within_s for v in views if v] == [30, 600]  # the tool's cap: 600 s
    polled = client.get(short.json()["poll_url"], headers=bearer(tokens.acme)).json()
    waiting = polled["waiting"]
    assert polled["next_action"] == "wait"
    assert set(waiting) == {"since", "seconds", "start_by", "dispatch", "dispatches"}
    assert (waiting["dispatch"], waiting["dispatches"]) == ("confirmed", 1)
    assert waiting["since"] == polled["created_at"] and waiting["seconds"] >= 0
    assert views[0] is not None and views[0].start_by is not None
    assert waiting["start_by"].startswith(views[0].start_by.strftime("%Y-%m-%dT%H:%M:%S"))


@pytest.mark.parametrize("value", [0, 0.5, -1, 604801, "soon"])
def test_a_start_deadline_out_of_range_is_refused_unrecorded(
    client: TestClient, tokens: Tokens, store: SqlStore, value: object
) -> None:
    before = settled_head(store)
    response = submit(
        client, tokens.acme, {"tool": ECHO, "args": {"text": "a"}, "start_within_s": value}
    )
    assert response.status_code == 422, response.text
    assert response.json()["job_id"] is None and settled_head(store) == before


def test_a_backlog_that_would_not_start_it_in_time_is_a_recorded_429(
    client: TestClient, tokens: Tokens, store: SqlStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The app's outbox measures the backlog (reliability tests measure it for real): 300
    jobs ahead at 10 a second is 30 s, past a 10 s deadline, within the tool's 600 s."""
    outbox = client.app.state.api.outbox  # type: ignore[attr-defined]
    monkeypatch.setattr(outbox.backlog, "current", lambda: Backlog(300, 10.0))
    hurried = {"tool": ECHO, "args": {"text": "a"}, "start_within_s": 10}
    job_id = assert_refusal(submit(client, tokens.acme, hurried), 429, "QUOTA_EXCEEDED", store)
    response = submit(client, tokens.acme, hurried)
    error = response.json()["error"]
    assert (error["cause"], error["dependency"], error["retry_after_s"]) == ("backlog", "queue", 20)
    assert response.headers["retry-after"] == "20"
    assert "30 s" in error["message"] and "start deadline of 10 s" in error["message"]
    assert get_job(store, job_id) is not None
    patient = submit(client, tokens.acme, {"tool": ECHO, "args": {"text": "b"}})
    assert patient.status_code == 202  # 30 s is within the tool's 600 s

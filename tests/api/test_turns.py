"""Turns and dry runs over HTTP (docs/turns.md), on SQLite and Postgres: a turn of six calls
with one failure never reads all_succeeded, and says what already happened; a halting turn
refuses its next call BRAKE_ENGAGED naming the turn's brake until the agent releases it; turn
ids and headers are checked; another account's turn is a 404; a dry run records nothing and
counts no quota."""

from __future__ import annotations

from typing import Any

from fastapi.testclient import TestClient

from ledger.persistence.sql_store import SqlStore
from ledger.runtime.ledger import Ledger
from ledger.services.execute import Executor
from tests.plugins.api import Tokens, bearer
from tests.store_helpers import settled_head
from tests.tools import APPROVED_CHARGE, ECHO, FAILING_CHARGE, METERED, QUOTA

CHARGE = "itest.charge"


def call(
    client: TestClient, token: str, tool: str, args: dict[str, Any], turn: str, halt: bool = False
) -> tuple[int, dict[str, Any]]:
    headers = bearer(token) | {"Outcomes-Turn": turn}
    if halt:
        headers["Outcomes-Turn-Halt"] = "on-failure"
    answer = client.post("/v1/jobs", json={"tool": tool, "args": args}, headers=headers)
    return answer.status_code, answer.json()


def run(store: SqlStore, job_id: object) -> None:
    Executor(Ledger(store), "w-1").execute(str(job_id))


def test_six_calls_one_failure_never_all_succeeded(
    client: TestClient, tokens: Tokens, store: SqlStore
) -> None:
    ids = []
    for i in range(4):
        status, body = call(client, tokens.acme, ECHO, {"text": f"t{i}"}, "turn-6")
        assert status == 202
        ids.append(body["job_id"])
    status, failing = call(client, tokens.acme, FAILING_CHARGE, {"amount": 3}, "turn-6")
    assert status == 202
    status, last = call(client, tokens.acme, ECHO, {"text": "later"}, "turn-6")
    for job_id in (*ids, failing["job_id"]):
        run(store, job_id)

    turn = client.get("/v1/turns/turn-6", headers=bearer(tokens.acme))
    assert turn.status_code == 200, turn.text
    body = turn.json()
    assert body["turn_id"] == "turn-6"
    assert [c["job_id"] for c in body["calls"]] == [*ids, failing["job_id"], last["job_id"]]
    assert body["counts"] == {"failed": 1, "queued": 1, "succeeded": 4}
    assert (body["complete"], body["all_succeeded"]) == (False, False)
    assert body["already_happened"] == ids
    assert body["first_failure"]["job_id"] == failing["job_id"]
    assert body["first_failure"]["tool"] == FAILING_CHARGE
    assert body["first_failure"]["error"]["code"] == "SOURCE_UNRELIABLE"
    assert body["first_failure"]["next_action"] == "stop_and_report"
    assert body["summary"] == (
        "6 calls: 4 succeeded, 1 failed (SOURCE_UNRELIABLE in itest.charge_failing: stop and "
        "report), 1 still running"
    )
    assert body["halt"] is None

    run(store, last["job_id"])  # every call ended: complete, and still not all succeeded
    done = client.get("/v1/turns/turn-6", headers=bearer(tokens.acme)).json()
    assert (done["complete"], done["all_succeeded"]) == (True, False)
    assert done["summary"].startswith("6 calls: 5 succeeded, 1 failed")

    # Another account's turn of that id is unknown; an operator of '*' names the account.
    assert client.get("/v1/turns/turn-6", headers=bearer(tokens.globex)).status_code == 404
    assert client.get("/v1/turns/turn-6", headers=bearer(tokens.operator)).status_code == 422
    seen = client.get("/v1/turns/turn-6?account=acme", headers=bearer(tokens.operator))
    assert seen.json()["summary"] == done["summary"]


def test_a_turn_that_only_succeeded_reads_all_succeeded(
    client: TestClient, tokens: Tokens, store: SqlStore
) -> None:
    for i in range(2):
        _, body = call(client, tokens.acme, ECHO, {"text": str(i)}, "clean")
        run(store, body["job_id"])
    body = client.get("/v1/turns/clean", headers=bearer(tokens.acme)).json()
    assert (body["complete"], body["all_succeeded"], body["first_failure"]) == (True, True, None)
    assert body["summary"] == "2 calls: 2 succeeded"


def test_a_halting_turn_refuses_its_next_call_until_released(
    client: TestClient, tokens: Tokens, store: SqlStore
) -> None:
    _, first = call(client, tokens.acme, CHARGE, {"amount": 1}, "pay-1", halt=True)
    run(store, first["job_id"])
    _, failing = call(client, tokens.acme, FAILING_CHARGE, {"amount": 2}, "pay-1", halt=True)
    run(store, failing["job_id"])

    status, refused = call(client, tokens.acme, CHARGE, {"amount": 3}, "pay-1", halt=True)
    assert status == 409, refused
    error = refused["error"]
    assert error["code"] == "BRAKE_ENGAGED"
    turn = client.get("/v1/turns/pay-1", headers=bearer(tokens.acme)).json()
    assert turn["halt"]["active"] is True
    assert turn["halt"]["scope"] == "turn:acme/pay-1"
    assert error["cause"] == turn["halt"]["brake_id"]
    assert failing["job_id"] in turn["halt"]["reason"]
    assert "DELETE /v1/turns/pay-1/halt" in error["fix"]
    assert turn["summary"].endswith(f"the turn is halted (brake {turn['halt']['brake_id']})")
    # Another turn of the account is not held.
    assert call(client, tokens.acme, CHARGE, {"amount": 4}, "pay-2", halt=True)[0] == 202

    released = client.delete("/v1/turns/pay-1/halt", headers=bearer(tokens.acme))
    assert released.status_code == 200, released.text
    assert released.json()["released"] == [turn["halt"]["brake_id"]]
    # Released, it stays released: the turn halts once.
    assert call(client, tokens.acme, CHARGE, {"amount": 5}, "pay-1", halt=True)[0] == 202


def test_headers_are_checked(client: TestClient, tokens: Tokens) -> None:
    bad = {"tool": ECHO, "args": {"text": "x"}}
    for headers in (
        {"Outcomes-Turn": "has space"},
        {"Outcomes-Turn": "t", "Outcomes-Turn-Halt": "always"},
        {"Outcomes-Turn-Halt": "on-failure"},
    ):
        answer = client.post("/v1/jobs", json=bad, headers=bearer(tokens.acme) | headers)
        assert answer.status_code == 422, (headers, answer.text)
        assert answer.json()["job_id"] is None
    assert client.get("/v1/turns/nope", headers=bearer(tokens.acme)).status_code == 404


def test_a_dry_run_records_nothing_and_counts_no_quota(
    client: TestClient, tokens: Tokens, store: SqlStore
) -> None:
    before = settled_head(store)

    def dry(tool: str, args: dict[str, Any], token: str | None = None) -> dict[str, Any]:
        body = {"tool": tool, "args": args, "dry_run": True}
        answer = client.post("/v1/jobs", json=body, headers=bearer(token or tokens.acme))
        assert answer.status_code == 200, answer.text
        found: dict[str, Any] = answer.json()
        return found

    assert dry(ECHO, {"text": "x"}) == {"would": "accepted", "error": None, "approval": None}
    parked = dry(APPROVED_CHARGE, {"amount": 1})
    assert parked["would"] == "awaiting_approval"
    assert parked["approval"]["reason"] == "this tool needs a person's approval for every call"
    missing = dry(ECHO, {})
    assert (missing["would"], missing["error"]["code"]) == ("refused", "INPUT_MISSING")
    for _ in range(QUOTA + 2):  # a dry run counts no quota
        assert dry(METERED, {"text": "x"})["would"] == "accepted"
    assert settled_head(store) == before  # nothing recorded
    for _ in range(QUOTA):
        assert (
            client.post(
                "/v1/jobs",
                json={"tool": METERED, "args": {"text": "x"}},
                headers=bearer(tokens.acme),
            ).status_code
            == 202
        )
    over = dry(METERED, {"text": "x"})
    assert (over["would"], over["error"]["code"]) == ("refused", "QUOTA_EXCEEDED")

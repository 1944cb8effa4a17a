"""Issue 47, item 2: nothing a client sends where money is at stake is silently ignored.

- The `Idempotency-Key` header (IETF draft, Stripe) is the body's `idempotency_key` by another
  way in: the same rules, a replay by either; both given and different is a 422.
- A query parameter a /v1 route does not take is refused (422), as an unknown body field is.
- An argument the tool's model does not name is refused, unless the model allows extras.
- (`brake pull` on a scope naming nothing known: tests/cli/test_operator_commands.py.)"""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient
from pydantic import BaseModel, ConfigDict

from ledger.tools import ToolContext, tool, unregister
from tests.plugins.api import Tokens, bearer
from tests.tools import ECHO

LOOSE = "apitest.loose"


class LooseArgs(BaseModel):
    model_config = ConfigDict(extra="allow")
    text: str


@pytest.fixture
def loose_tool() -> object:
    @tool(LOOSE)
    def loose(args: LooseArgs, ctx: ToolContext) -> dict[str, str]:
        return {"text": args.text}

    yield loose
    unregister(LOOSE)


def post(client: TestClient, token: str, body: object, **headers: str) -> object:
    return client.post("/v1/jobs", json=body, headers=bearer(token) | headers)


def test_the_idempotency_key_header_replays_as_the_body_field_does(
    client: TestClient, tokens: Tokens
) -> None:
    body = {"tool": ECHO, "args": {"text": "pay once"}}
    first = client.post(
        "/v1/jobs", json=body, headers=bearer(tokens.acme) | {"Idempotency-Key": "k-1"}
    )
    again = client.post(
        "/v1/jobs", json=body, headers=bearer(tokens.acme) | {"Idempotency-Key": "k-1"}
    )
    assert first.status_code == again.status_code == 202, first.text
    assert first.json()["job_id"] == again.json()["job_id"]  # one job: paid once
    in_body = client.post(
        "/v1/jobs", json=body | {"idempotency_key": "k-1"}, headers=bearer(tokens.acme)
    )
    assert in_body.json()["job_id"] == first.json()["job_id"]  # the same key, either way
    same = client.post(
        "/v1/jobs",
        json=body | {"idempotency_key": "k-1"},
        headers=bearer(tokens.acme) | {"Idempotency-Key": "k-1"},
    )
    assert same.json()["job_id"] == first.json()["job_id"]
    other = client.post(
        "/v1/jobs", json=body, headers=bearer(tokens.acme) | {"Idempotency-Key": "k-2"}
    )
    assert other.json()["job_id"] != first.json()["job_id"]


def test_a_header_and_a_body_key_that_differ_are_refused(
    client: TestClient, tokens: Tokens
) -> None:
    answer = client.post(
        "/v1/jobs",
        json={"tool": ECHO, "args": {"text": "x"}, "idempotency_key": "k-body"},
        headers=bearer(tokens.acme) | {"Idempotency-Key": "k-header"},
    )
    assert answer.status_code == 422, answer.text
    assert answer.json()["error"]["code"] == "INPUT_INVALID"
    assert "Idempotency-Key" in answer.json()["error"]["message"]
    too_long = client.post(
        "/v1/jobs",
        json={"tool": ECHO, "args": {"text": "x"}},
        headers=bearer(tokens.acme) | {"Idempotency-Key": "k" * 201},
    )
    assert too_long.status_code == 422  # the body field's own rule: at most 200


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("POST", "/v1/jobs?dry_run=1"),
        ("GET", "/v1/jobs/{job}?wiat=30"),
        ("GET", "/v1/jobs/{job}?wait=0&until=terminal&x=1"),
        ("GET", "/v1/tools?verbose=1"),
        ("GET", "/v1/webhooks?acount=acme"),
    ],
)
def test_an_unknown_query_parameter_is_refused(
    client: TestClient, tokens: Tokens, method: str, path: str
) -> None:
    made = client.post(
        "/v1/jobs", json={"tool": ECHO, "args": {"text": "x"}}, headers=bearer(tokens.acme)
    )
    job = made.json()["job_id"]
    body = {"tool": ECHO, "args": {"text": "not for real"}} if method == "POST" else None
    answer = client.request(method, path.format(job=job), json=body, headers=bearer(tokens.acme))
    assert answer.status_code == 422, answer.text
    assert "Unknown query parameter" in answer.json()["error"]["message"]
    # The known ones still pass.
    fine = client.get(f"/v1/jobs/{job}?wait=0&until=terminal", headers=bearer(tokens.acme))
    assert fine.status_code == 200


def test_an_argument_the_tool_does_not_take_is_refused(
    client: TestClient, tokens: Tokens, loose_tool: object
) -> None:
    answer = client.post(
        "/v1/jobs",
        json={"tool": ECHO, "args": {"text": "T-1", "txet": 1}},
        headers=bearer(tokens.acme),
    )
    assert answer.status_code == 422, answer.text
    error = answer.json()["error"]
    assert error["code"] == "INPUT_INVALID" and "'txet'" in error["message"]
    allowed = client.post(
        "/v1/jobs",
        json={"tool": LOOSE, "args": {"text": "T-1", "extra": 1}},
        headers=bearer(tokens.acme),
    )
    assert allowed.status_code == 202, allowed.text  # its model allows extras

"""Names and keys over HTTP (ledger/identifiers.py): a tool name or idempotency key holding a
control, bidirectional or zero-width character is a 422 INPUT_INVALID problem naming the
character by code point, and nothing is recorded; an account filter is a full match."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient

from ledger import identifiers
from ledger.persistence.sql_store import SqlStore
from tests.factories import ERROR_KEYS
from tests.plugins.api import Tokens, bearer
from tests.store_helpers import settled_head
from tests.tools import ECHO

UNSAFE = ["\u202e", "\u2066", "\u061c", "\u200b", "\ufeff", "\x85"]


def assert_unrecorded_422(response: Any, store: SqlStore, before: int, char: str) -> str:
    assert response.status_code == 422, response.text
    assert response.headers["content-type"] == "application/problem+json"
    problem = response.json()
    assert set(problem) == {"type", "title", "status", "detail", "job_id", "error"}
    assert set(problem["error"]) == ERROR_KEYS
    assert problem["error"]["code"] == "INPUT_INVALID" and problem["job_id"] is None
    assert f"U+{ord(char):04X}" in problem["detail"]
    assert problem["error"]["message"] == problem["detail"]
    assert char not in response.text  # named, never echoed
    assert settled_head(store) == before  # nothing recorded
    detail: str = problem["detail"]
    return detail


@pytest.mark.parametrize("char", UNSAFE)
def test_an_idempotency_key_with_such_a_character_is_422_unrecorded(
    client: TestClient, tokens: Tokens, store: SqlStore, char: str
) -> None:
    before = settled_head(store)
    body = {"tool": ECHO, "args": {"text": "x"}, "idempotency_key": f"plan{char}T-1"}
    response = client.post("/v1/jobs", json=body, headers=bearer(tokens.acme))
    detail = assert_unrecorded_422(response, store, before, char)
    assert "idempotency_key: the idempotency key holds" in detail
    # The key without it is an ordinary key.
    body["idempotency_key"] = "planT-1"
    assert client.post("/v1/jobs", json=body, headers=bearer(tokens.acme)).status_code == 202


@pytest.mark.parametrize("char", UNSAFE)
def test_a_tool_name_with_such_a_character_is_422_unrecorded(
    client: TestClient, tokens: Tokens, store: SqlStore, char: str
) -> None:
    before = settled_head(store)
    body = {"tool": ECHO + char, "args": {"text": "x"}}
    response = client.post("/v1/jobs", json=body, headers=bearer(tokens.acme))
    detail = assert_unrecorded_422(response, store, before, char)
    assert "tool: the tool name holds" in detail


def test_the_document_says_so(client: TestClient) -> None:
    post = client.get("/openapi.json").json()["paths"]["/v1/jobs"]["post"]
    schema = post["requestBody"]["content"]["application/json"]["schema"]
    pattern = schema["properties"]["tool"]["pattern"]
    assert pattern == identifiers.PATTERN and "\\u007f-\\u009f" in pattern
    key = next(s for s in schema["properties"]["idempotency_key"]["anyOf"] if "pattern" in s)
    assert key["pattern"] == pattern


@pytest.mark.parametrize("account", ["acme\n", "acme\u202e"])
def test_an_account_filter_is_a_full_match(
    client: TestClient, tokens: Tokens, account: str
) -> None:
    response = client.get(
        "/v1/audit/events", params={"account": account}, headers=bearer(tokens.operator)
    )
    assert response.status_code == 422, response.text
    assert response.json()["error"]["code"] == "INPUT_INVALID"

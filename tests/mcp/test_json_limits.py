"""The MCP door refuses what the HTTP door refuses (issue 47, Lows): arguments nesting deeper
than POST /v1/jobs allows, numbers that are not finite (NaN, Infinity: the SDK's parser takes
them, JSON has none) and integers beyond 64 bits. Raw JSON-RPC over the streamable HTTP app,
so the client cannot clean the document first."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from fastapi.testclient import TestClient

from api.app import create_app
from ledger.json_limits import MAX_JSON_DEPTH
from ledger.persistence.memory import MemoryStore
from ledger.runtime.ledger import Ledger
from ledger.services import tokens
from tests.tools import ECHO

MCP_ECHO = ECHO.replace(".", "__")


def nested(levels: int) -> str:
    return "[" * levels + "]" * levels


@pytest.fixture
def door() -> tuple[TestClient, str]:
    ledger = Ledger(MemoryStore())
    agent = tokens.create(ledger, "acme", "agent", None, actor="tests").token
    return TestClient(create_app(ledger, None)), agent


def call(client: TestClient, token: str, arguments: str) -> dict[str, Any]:
    """tools/call with `arguments` written as raw JSON text; the call's result."""
    body = (
        '{"jsonrpc":"2.0","id":7,"method":"tools/call",'
        f'"params":{{"name":"{MCP_ECHO}","arguments":{arguments}}}}}'
    )
    answer = client.post(
        "/mcp",
        content=body,
        headers={
            "Accept": "application/json, text/event-stream",
            "Content-Type": "application/json",
            "Authorization": f"Bearer {token}",
        },
    )
    assert answer.status_code == 200, answer.text
    (data,) = [line[6:] for line in answer.text.splitlines() if line.startswith("data: ")]
    result: dict[str, Any] = orjson.loads(data)["result"]
    return result


def submit(client: TestClient, token: str, args: str) -> int:
    body = f'{{"tool":"{ECHO}","args":{args}}}'
    headers = {"Content-Type": "application/json", "Authorization": f"Bearer {token}"}
    return client.post("/v1/jobs", content=body, headers=headers).status_code


# The arguments sit at depth 2 on both doors (POST /v1/jobs: the body, then its `args`).
TOO_DEEP = nested(MAX_JSON_DEPTH - 1)  # the arguments' object, then this: one level too many


@pytest.mark.parametrize(
    ("arguments", "said"),
    [
        ('{"text":NaN}', "not finite"),
        ('{"text":"x","extra":Infinity}', "not finite"),
        ('{"text":"x","extra":[1,-Infinity]}', "not finite"),
        (f'{{"text":{TOO_DEEP}}}', f"nesting deeper than {MAX_JSON_DEPTH} levels"),
        ('{"text":18446744073709551616}', "beyond 64 bits"),
    ],
)
def test_mcp_refuses_what_the_http_door_refuses(
    door: tuple[TestClient, str], arguments: str, said: str
) -> None:
    client, token = door
    with client:
        assert submit(client, token, arguments) in (400, 422)  # the HTTP door's answer
        result = call(client, token, arguments[:-1] + ',"_wait_s":0}')
    assert result["isError"] is True, result
    error = result["structuredContent"]["error"]
    assert error["code"] == "INPUT_INVALID" and said in error["message"], error


def test_nesting_up_to_the_http_doors_limit_is_not_refused_for_its_depth(
    door: tuple[TestClient, str],
) -> None:
    client, token = door
    deepest = f'{{"text":"x","extra":{nested(MAX_JSON_DEPTH - 2)}}}'
    with client:
        assert submit(client, token, deepest) == 422  # the tool's model: no `extra`
        result = call(client, token, deepest[:-1] + ',"_wait_s":0}')
    assert "nesting deeper" not in result["structuredContent"]["error"]["message"]

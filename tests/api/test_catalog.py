"""`GET /v1/tools`: the tools a token may call (its tool list and the enabled tools), with
their arguments' schema, limits and what the account has left of each quota."""

from __future__ import annotations

from typing import Any

from fastapi.testclient import TestClient

from tests.plugins.api import Tokens, bearer
from tests.tools import ECHO, METERED, OFF, QUOTA


def catalog(client: TestClient, token: str) -> dict[str, dict[str, Any]]:
    response = client.get("/v1/tools", headers=bearer(token))
    assert response.status_code == 200, response.text
    return {tool["name"]: tool for tool in response.json()["tools"]}


def test_an_agent_sees_the_enabled_tools_with_schemas_limits_and_quota_left(
    client: TestClient, tokens: Tokens
) -> None:
    tools = catalog(client, tokens.acme)
    assert ECHO in tools and METERED in tools
    assert OFF not in tools  # disabled: a submit would be refused
    echo = tools[ECHO]
    assert echo["args_schema"]["required"] == ["text"]
    assert set(echo["args_schema"]["properties"]) == {"text", "times"}
    assert (echo["spends"], echo["timeout_s"], echo["max_attempts"]) == (False, 300.0, 3)
    assert echo["quota"] is None and echo["enabled"] is True
    assert tools[METERED]["quota"] == {"limit": QUOTA, "window_s": 3600, "remaining": QUOTA}

    submitted = client.post(
        "/v1/jobs", json={"tool": METERED, "args": {"text": "x"}}, headers=bearer(tokens.acme)
    )
    assert submitted.status_code == 202, submitted.text
    assert catalog(client, tokens.acme)[METERED]["quota"]["remaining"] == QUOTA - 1
    # Quotas are per account: another account's agent still has all of it.
    assert catalog(client, tokens.globex)[METERED]["quota"]["remaining"] == QUOTA


def test_a_token_limited_to_one_tool_sees_only_it(client: TestClient, tokens: Tokens) -> None:
    assert list(catalog(client, tokens.echo_only)) == [ECHO]


def test_an_operator_sees_every_enabled_tool_without_an_account_to_count(
    client: TestClient, tokens: Tokens
) -> None:
    tools = catalog(client, tokens.operator)
    assert ECHO in tools and OFF not in tools
    assert tools[METERED]["quota"]["remaining"] is None  # '*' is no one account


def test_no_token_is_401(client: TestClient) -> None:
    response = client.get("/v1/tools")
    assert response.status_code == 401
    assert response.json()["error"]["code"] == "ACCESS_DENIED"


def test_declared_secrets_and_the_answers_budget_are_in_the_catalog(
    client: TestClient, tokens: Tokens
) -> None:
    tools = catalog(client, tokens.acme)
    login = tools["vault.login"]
    password = login["args_schema"]["properties"]["password"]
    assert (password["format"], password["writeOnly"]) == ("password", True)
    assert "format" not in login["args_schema"]["properties"]["user"]
    assert login["max_result_bytes"] == 65_536
    assert tools["budget.small_cap"]["max_result_bytes"] == 1024

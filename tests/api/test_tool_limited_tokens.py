"""A token limited to some tools acts within them (issue 47, Lows): it reads the account's jobs
but cancels only its tools' (403 otherwise, over HTTP and MCP, the job unchanged), and it
neither registers nor removes webhooks, which receive every tool's outcomes."""

from __future__ import annotations

from typing import Any

import orjson
from fastapi.testclient import TestClient

from tests.api.test_webhooks import PUBLIC_URL, register
from tests.plugins.api import Tokens, bearer
from tests.tools import ECHO, METERED


def submit(client: TestClient, token: str, tool: str) -> str:
    answer = client.post(
        "/v1/jobs", json={"tool": tool, "args": {"text": "x"}}, headers=bearer(token)
    )
    assert answer.status_code == 202, answer.text
    job_id: str = answer.json()["job_id"]
    return job_id


def status_of(client: TestClient, job_id: str, token: str) -> str:
    found: str = client.get(f"/v1/jobs/{job_id}", headers=bearer(token)).json()["status"]
    return found


def mcp_cancel(client: TestClient, token: str, job_id: str) -> dict[str, Any]:
    call = {
        "jsonrpc": "2.0",
        "id": 3,
        "method": "tools/call",
        "params": {"name": "outcome_cancel", "arguments": {"job_id": job_id}},
    }
    headers = {"Accept": "application/json, text/event-stream", "Authorization": f"Bearer {token}"}
    answer = client.post("/mcp", json=call, headers=headers)
    assert answer.status_code == 200, answer.text
    (data,) = [line[6:] for line in answer.text.splitlines() if line.startswith("data: ")]
    result: dict[str, Any] = orjson.loads(data)["result"]
    return result


def test_a_tool_limited_token_cancels_only_its_tools_jobs(
    client: TestClient, tokens: Tokens
) -> None:
    others = [submit(client, tokens.acme, METERED) for _ in range(2)]
    refused = client.post(f"/v1/jobs/{others[0]}/cancel", headers=bearer(tokens.echo_only))
    assert refused.status_code == 403, refused.text
    error = refused.json()["error"]
    assert (error["code"], error["required_capability"]) == ("ACCESS_DENIED", f"tool:{METERED}")
    over_mcp = mcp_cancel(client, tokens.echo_only, others[1])
    assert over_mcp["isError"] is True
    assert over_mcp["structuredContent"]["error"]["code"] == "ACCESS_DENIED"
    # Read, not changed; the account's unlimited token and an operator still cancel them.
    assert [status_of(client, j, tokens.echo_only) for j in others] == ["queued", "queued"]
    assert (
        client.post(f"/v1/jobs/{others[0]}/cancel", headers=bearer(tokens.acme)).status_code == 200
    )
    own = submit(client, tokens.echo_only, ECHO)
    mine = client.post(f"/v1/jobs/{own}/cancel", headers=bearer(tokens.echo_only))
    assert (mine.status_code, mine.json()["status"]) == (200, "declined")


def test_a_tool_limited_token_neither_registers_nor_removes_webhooks(
    client: TestClient, tokens: Tokens
) -> None:
    refused = client.post(
        "/v1/webhooks", json={"url": PUBLIC_URL}, headers=bearer(tokens.echo_only)
    )
    assert refused.status_code == 403, refused.text
    assert "every tool's outcomes" in refused.json()["error"]["message"]
    assert client.get("/v1/webhooks", headers=bearer(tokens.acme)).json()["webhooks"] == []
    hook = register(client, tokens.acme)
    removing = client.delete(f"/v1/webhooks/{hook['id']}", headers=bearer(tokens.echo_only))
    assert removing.status_code == 403, removing.text
    assert len(client.get("/v1/webhooks", headers=bearer(tokens.acme)).json()["webhooks"]) == 1

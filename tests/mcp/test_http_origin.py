"""MCP over HTTP checks where a request comes from before anything else (the transport: servers
MUST validate `Origin`): a page of another origin is refused 403, a `Host` this server does not
answer under 421 (DNS rebinding), both before the token is read; clients that send no `Origin`
(every non-browser client) pass. And the stateless endpoint is POST only: a GET, which would
hold an event stream open, is 405 at once. Against the real streamable HTTP app: in-process
(TestClient) and served by uvicorn on 127.0.0.1 (the loopback rule needs a real connection)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient

from api.app import create_app
from api.server import BackgroundServer
from ledger.persistence.memory import MemoryStore
from ledger.runtime.ledger import Ledger
from ledger.services import tokens

INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-06-18",
        "capabilities": {},
        "clientInfo": {"name": "origin-test", "version": "1"},
    },
}
REALM = 'Bearer realm="outcome-ledger"'
ACCEPT = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}


@pytest.fixture
def ledger() -> Ledger:
    return Ledger(MemoryStore())


@pytest.fixture
def agent(ledger: Ledger) -> str:
    return tokens.create(ledger, "acme", "agent", None, actor="tests").token


def client_of(ledger: Ledger) -> TestClient:
    return TestClient(create_app(ledger, None), follow_redirects=False)


def headers(token: str, **extra: str) -> dict[str, str]:
    return ACCEPT | {"Authorization": f"Bearer {token}"} | extra


def assert_refused(response: Any, status: int, said: str) -> None:
    assert response.status_code == status, response.text
    body = response.json()
    assert body["error"]["code"] == -32600 and said in body["error"]["message"]
    assert body["error"]["data"]["error"]["code"] == "ACCESS_DENIED"
    assert body["error"]["data"]["error"]["fix"]


def test_a_page_of_another_origin_is_refused_and_programs_pass(ledger: Ledger, agent: str) -> None:
    with client_of(ledger) as client:
        for origin in ("https://evil.example", "http://testserver.evil.example", "null", "x"):
            answer = client.post("/mcp", json=INITIALIZE, headers=headers(agent, Origin=origin))
            assert_refused(answer, 403, "this origin")
        # Before the token: a foreign page learns nothing about tokens either.
        answer = client.post(
            "/mcp", json=INITIALIZE, headers=headers("ol_wrong", Origin="https://evil.example")
        )
        assert_refused(answer, 403, "this origin")
        allowed = (
            None,  # no Origin: a program, not a browser page
            "http://testserver",  # this server's own page
            "https://testserver",  # its page over HTTPS, TLS ended by a proxy in front
            "http://localhost:6274",  # a page served from this machine (an MCP inspector)
            "http://127.0.0.1:3000",
        )
        for origin in allowed:
            extra = {"Origin": origin} if origin else {}
            answer = client.post("/mcp", json=INITIALIZE, headers=headers(agent, **extra))
            assert answer.status_code == 200, (origin, answer.text)
            assert "serverInfo" in answer.text


def test_origins_an_operator_lists_are_allowed(
    ledger: Ledger, agent: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OUTCOMES_ALLOWED_ORIGINS", "https://Agents.Example, http://lab:8080")
    with client_of(ledger) as client:
        for origin, status in (
            ("https://agents.example", 200),
            ("https://agents.example:443", 200),  # the same origin, its default port spelt
            ("http://lab:8080", 200),
            ("https://agents.example:8443", 403),
            ("http://agents.example", 403),
        ):
            answer = client.post("/mcp", json=INITIALIZE, headers=headers(agent, Origin=origin))
            assert answer.status_code == status, origin


def test_the_stateless_endpoint_is_post_only(ledger: Ledger, agent: str) -> None:
    with client_of(ledger) as client:
        for method in ("GET", "DELETE"):
            answer = client.request(method, "/mcp", headers=headers(agent))
            assert answer.status_code == 405, method
            assert answer.headers["allow"] == "POST"
            assert answer.headers["content-type"] == "application/problem+json"


@pytest.fixture
def served(ledger: Ledger, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    monkeypatch.setenv("OUTCOMES_ALLOWED_HOSTS", "ledger.example")
    server = BackgroundServer(ledger, None)
    base = server.start()
    try:
        yield base
    finally:
        server.stop()


def test_on_loopback_only_this_machines_names_and_the_listed_hosts_are_answered(
    served: str, agent: str
) -> None:
    port = httpx.URL(served).port
    with httpx.Client(base_url=served, timeout=10) as http:
        for host in (f"evil.example:{port}", "evil.example", f"localhost.evil.example:{port}"):
            answer = http.post("/mcp", json=INITIALIZE, headers=headers(agent, Host=host))
            assert_refused(answer, 421, "Host")
        for host in (f"127.0.0.1:{port}", f"localhost:{port}", f"[::1]:{port}", "127.0.0.2"):
            answer = http.post("/mcp", json=INITIALIZE, headers=headers(agent, Host=host))
            assert answer.status_code == 200, (host, answer.text)
        for host in (f"ledger.example:{port}", "LEDGER.example"):  # OUTCOMES_ALLOWED_HOSTS
            answer = http.post("/mcp", json=INITIALIZE, headers=headers(agent, Host=host))
            assert answer.status_code == 200, (host, answer.text)
        # A DNS-rebinding page is same-origin with itself: its Host is what refuses it.
        rebinding = {"Host": f"evil.example:{port}", "Origin": f"http://evil.example:{port}"}
        answer = http.post("/mcp", json=INITIALIZE, headers=headers(agent, **rebinding))
        assert_refused(answer, 421, "Host")


def test_a_get_is_answered_at_once_never_held_open(served: str, agent: str) -> None:
    started = time.monotonic()
    with httpx.Client(base_url=served, timeout=10) as http:
        answer = http.get("/mcp", headers=headers(agent))
    assert answer.status_code == 405 and answer.headers["allow"] == "POST"
    assert time.monotonic() - started < 5


@pytest.mark.parametrize(
    ("auth", "challenge"),
    [
        ({"Authorization": "Bearer ol_wrong"}, f'{REALM}, error="invalid_token"'),
        ({}, REALM),
    ],
)
def test_a_wrong_token_is_invalid_token_so_a_client_stops_before_oauth_discovery(
    ledger: Ledger, agent: str, auth: dict[str, str], challenge: str
) -> None:
    """RFC 6750 §3: a token presented and refused (unknown or revoked) answers 401 with
    `error="invalid_token"`; without a token, the bare challenge."""
    with client_of(ledger) as client:
        answer = client.post("/mcp", json=INITIALIZE, headers=ACCEPT | auth)
        assert answer.status_code == 401, answer.text
        assert answer.json()["error"]["data"]["error"]["code"] == "ACCESS_DENIED"
        assert answer.headers["www-authenticate"] == challenge
        tokens.revoke(ledger, tokens.authenticate(ledger, agent).token_id, actor="tests")
        revoked = client.post("/mcp", json=INITIALIZE, headers=headers(agent))
        assert revoked.status_code == 401
        assert revoked.headers["www-authenticate"].endswith('error="invalid_token"')

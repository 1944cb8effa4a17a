"""How `outcomes serve` meets the network (ledger.settings; docs/deploy.md, "Behind a load
balancer"): X-Forwarded-Proto counts only from the proxies in OUTCOMES_FORWARDED_ALLOW_IPS (so the
console's cookie is Secure behind a TLS-terminating load balancer, and never because a client
said so), and one process serves at most OUTCOMES_MAX_CONNECTIONS connections at once.

Where the headers matter, a real server: `outcomes serve` as a process, or uvicorn on a thread
with the very configuration `outcomes serve` builds (api.server)."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest

from api import server as api_server
from api.server import BackgroundServer, connection_warning
from ledger.errors import ConfigurationError
from ledger.persistence.memory import MemoryStore
from ledger.runtime.ledger import Ledger, open_ledger
from ledger.services import admin, tokens
from ledger.settings import MAX_CONNECTIONS, load_settings
from tests.serving import embedded_env, serving

HTTPS = {"X-Forwarded-Proto": "https"}


def sign_in_cookie(base: str, token: str, headers: dict[str, str]) -> str:
    answer = httpx.post(
        f"{base}/console/sign-in", data={"token": token}, headers=headers, timeout=10
    )
    assert answer.status_code == 303, answer.text
    return answer.headers["set-cookie"]


def test_behind_a_trusted_proxy_the_cookie_follows_the_clients_scheme(tmp_path: Path) -> None:
    """A real `outcomes serve` told that 127.0.0.1 is its load balancer."""
    ledger = open_ledger(f"sqlite:///{tmp_path / '.outcomes' / 'ledger.db'}")
    (tmp_path / ".outcomes").mkdir(exist_ok=True)
    try:
        admin.migrate(ledger)
        operator = tokens.create(ledger, "*", "operator", None, actor="tests").token
    finally:
        ledger.close()
    env = embedded_env(OUTCOMES_FORWARDED_ALLOW_IPS="127.0.0.1", OUTCOMES_MAX_CONNECTIONS="3")
    with serving(tmp_path, env) as base:
        assert "Secure" in sign_in_cookie(base, operator, HTTPS)
        assert "Secure" not in sign_in_cookie(base, operator, {"X-Forwarded-Proto": "http"})
        assert "Secure" not in sign_in_cookie(base, operator, {})
        assert_capped(base, 3)


@pytest.fixture
def ledger() -> Ledger:
    return Ledger(MemoryStore())


@contextmanager
def background(ledger: Ledger) -> Iterator[str]:
    server = BackgroundServer(ledger, None)
    base = server.start()
    try:
        yield base
    finally:
        server.stop()


def test_without_the_setting_no_client_can_claim_https(
    ledger: Ledger, monkeypatch: pytest.MonkeyPatch
) -> None:
    operator = tokens.create(ledger, "*", "operator", None, actor="tests").token
    # uvicorn's own default would believe 127.0.0.1, or whatever its FORWARDED_ALLOW_IPS says.
    monkeypatch.setenv("FORWARDED_ALLOW_IPS", "*")
    with background(ledger) as base:
        assert "Secure" not in sign_in_cookie(base, operator, HTTPS)
    monkeypatch.setenv("OUTCOMES_FORWARDED_ALLOW_IPS", "10.0.0.0/8")  # not who connects here
    with background(ledger) as base:
        assert "Secure" not in sign_in_cookie(base, operator, HTTPS)
    monkeypatch.setenv("OUTCOMES_COOKIE_SECURE", "1")  # the other way: Secure, whatever is said
    with background(ledger) as base:
        assert "Secure" in sign_in_cookie(base, operator, {})


def ask(connection: socket.socket) -> bytes:
    """One request on a kept-alive connection; the status line of its whole answer read."""
    connection.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
    answer = b""
    while b"\r\n\r\n" not in answer:
        chunk = connection.recv(65536)
        assert chunk, "closed before an answer"
        answer += chunk
    head, _, body = answer.partition(b"\r\n\r\n")
    length = next(
        int(line.split(b":", 1)[1])
        for line in head.split(b"\r\n")
        if line.lower().startswith(b"content-length:")
    )
    while len(body) < length:
        body += connection.recv(65536)
    return head.split(b"\r\n", 1)[0]


def assert_capped(base: str, cap: int) -> None:
    """`cap` keep-alive connections are served together; one more is answered 503 and closed;
    once one closes, a new one is served again."""
    address = ("127.0.0.1", httpx.URL(base).port or 80)
    held = [socket.create_connection(address, timeout=10) for _ in range(cap)]
    try:
        for connection in held:
            assert ask(connection) == b"HTTP/1.1 200 OK"
        with socket.create_connection(address, timeout=10) as extra:
            assert ask(extra) == b"HTTP/1.1 503 Service Unavailable"
            assert extra.recv(65536) == b""  # and the connection is closed
        for connection in held:  # the held ones are still served
            assert ask(connection) == b"HTTP/1.1 200 OK"
    finally:
        for connection in held:
            connection.close()
    deadline = time.monotonic() + 10
    while True:  # the server notices the closes on its own time
        with socket.create_connection(address, timeout=10) as again:
            if ask(again) == b"HTTP/1.1 200 OK":
                return
        assert time.monotonic() < deadline, "no connection served after the others closed"
        time.sleep(0.05)


def test_a_process_serves_at_most_its_connections(
    ledger: Ledger, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OUTCOMES_MAX_CONNECTIONS", "2")
    with background(ledger) as base:
        assert_capped(base, 2)


def test_the_settings_reach_uvicorn(ledger: Ledger, monkeypatch: pytest.MonkeyPatch) -> None:
    config = api_server._config(ledger, None, "127.0.0.1", 0, "warning")
    assert config.proxy_headers is False
    assert config.limit_concurrency == MAX_CONNECTIONS + 1
    # The client closes an idle connection before the server does (never a reuse that races
    # the server's close): longer than httpx's keep-alive and a load balancer's usual 60 s.
    keep = httpx.Limits().keepalive_expiry
    assert keep is not None and config.timeout_keep_alive > max(keep, 60)
    monkeypatch.setenv("OUTCOMES_FORWARDED_ALLOW_IPS", "10.0.0.1, 192.168.0.0/16")
    monkeypatch.setenv("OUTCOMES_MAX_CONNECTIONS", "50")
    monkeypatch.setenv("OUTCOMES_KEEP_ALIVE_S", "20")
    config = api_server._config(ledger, None, "127.0.0.1", 0, "warning")
    assert config.proxy_headers is True
    assert config.forwarded_allow_ips == ["10.0.0.1", "192.168.0.0/16"]
    assert config.limit_concurrency == 51
    assert config.timeout_keep_alive == 20


@pytest.mark.parametrize(
    ("name", "value", "said"),
    [
        ("OUTCOMES_FORWARDED_ALLOW_IPS", "10.0.0.1,lb.internal", "not an IP address"),
        ("OUTCOMES_FORWARDED_ALLOW_IPS", "*,10.0.0.1", "not an IP address"),
        ("OUTCOMES_FORWARDED_ALLOW_IPS", "10.0.0.0/33", "not an IP address"),
        ("OUTCOMES_COOKIE_SECURE", "sometimes", "must be one of"),
        ("OUTCOMES_ALLOWED_ORIGINS", "https://ledger.example.com/console", "not an origin"),
        ("OUTCOMES_ALLOWED_ORIGINS", "ledger.example.com", "not an origin"),
        ("OUTCOMES_ALLOWED_ORIGINS", "ftp://ledger.example.com", "not an origin"),
        ("OUTCOMES_ALLOWED_HOSTS", "ledger.example.com:443", "not a host name"),
        ("OUTCOMES_ALLOWED_HOSTS", "https://ledger.example.com", "not a host name"),
        ("OUTCOMES_MAX_CONNECTIONS", "0", "from 1 to"),
        ("OUTCOMES_MAX_CONNECTIONS", "many", "whole number"),
    ],
)
def test_a_malformed_setting_is_one_line_at_startup(
    monkeypatch: pytest.MonkeyPatch, name: str, value: str, said: str
) -> None:
    monkeypatch.setenv(name, value)
    with pytest.raises(ConfigurationError, match=said) as raised:
        load_settings()
    assert name in str(raised.value)


def test_the_settings_read_as_documented(monkeypatch: pytest.MonkeyPatch) -> None:
    defaults = load_settings()
    assert defaults.forwarded_allow_ips == () and defaults.cookie_secure is False
    assert defaults.allowed_origins == frozenset() and defaults.allowed_hosts == frozenset()
    assert defaults.max_connections == MAX_CONNECTIONS == 1000
    monkeypatch.setenv("OUTCOMES_FORWARDED_ALLOW_IPS", "*")
    monkeypatch.setenv("OUTCOMES_ALLOWED_ORIGINS", "HTTPS://Ledger.Example.com:443, http://a:81")
    monkeypatch.setenv("OUTCOMES_ALLOWED_HOSTS", "Ledger.Example.com, [::1]")
    found = load_settings()
    assert found.forwarded_allow_ips == ("*",)
    assert found.allowed_origins == {"https://ledger.example.com", "http://a:81"}
    assert found.allowed_hosts == {"ledger.example.com", "[::1]"}


def test_a_cap_above_the_open_file_limit_is_said_at_startup(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(api_server.resource, "getrlimit", lambda _which: (1024, 4096))
    assert connection_warning(load_settings()) is not None  # 1000 + the spare files > 1024
    monkeypatch.setenv("OUTCOMES_MAX_CONNECTIONS", "500")
    assert connection_warning(load_settings()) is None


# --- M1: connections that never ask (api.connections; docs/security.md) ---------------------


def connect(base: str, source: str = "127.0.0.1") -> socket.socket:
    """A connection from `source` (any 127.x address is this host's loopback, so a test can
    be many clients)."""
    address = ("127.0.0.1", httpx.URL(base).port or 80)
    return socket.create_connection(address, timeout=10, source_address=(source, 0))


def closed_by_server(connection: socket.socket) -> bool:
    try:
        return connection.recv(65536) == b""
    except ConnectionResetError:
        return True


def test_fifty_idle_sockets_against_a_cap_of_twenty_leave_healthz_answering(
    ledger: Ledger, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The finding: 20 connections that never send a byte made every request a 503. Now the
    oldest that never asked makes room, per address and process-wide."""
    monkeypatch.setenv("OUTCOMES_MAX_CONNECTIONS", "20")
    with background(ledger) as base:
        idle = [connect(base) for _ in range(50)]  # one address
        idle += [connect(base, f"127.0.0.{10 + n}") for n in range(25)]  # many addresses
        try:
            started = time.monotonic()
            answer = httpx.get(f"{base}/healthz", timeout=5)
            assert answer.status_code == 200, answer.text
            assert time.monotonic() - started < 5
            # And again from a fresh address, on a kept-alive connection that asks twice.
            with connect(base, "127.0.0.77") as asking:
                assert ask(asking) == b"HTTP/1.1 200 OK"
                assert ask(asking) == b"HTTP/1.1 200 OK"
        finally:
            for connection in idle:
                connection.close()


def test_a_connection_that_sends_no_headers_in_time_is_closed(
    ledger: Ledger, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OUTCOMES_HEADER_TIMEOUT_S", "1")
    with background(ledger) as base:
        with connect(base) as silent:
            assert closed_by_server(silent)  # within the socket's 10 s, or recv raises
        with connect(base) as dripping:
            request = b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Pad: " + b"a" * 100
            closed = False
            for byte in request:  # 100+ bytes at 0.05 s: past the 1 s timer, never complete
                try:
                    dripping.sendall(bytes([byte]))
                except (BrokenPipeError, ConnectionResetError):
                    closed = True
                    break
                time.sleep(0.05)  # the drip's pace, not a wait for the server
            assert closed or closed_by_server(dripping)
        with connect(base) as asking:  # one that asks in time is served, twice
            assert ask(asking) == b"HTTP/1.1 200 OK"
            assert ask(asking) == b"HTTP/1.1 200 OK"


def test_one_address_holds_at_most_its_connections_except_a_trusted_proxy(
    ledger: Ledger, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OUTCOMES_MAX_CONNECTIONS", "10")
    monkeypatch.setenv("OUTCOMES_MAX_CONNECTIONS_PER_CLIENT", "2")
    with background(ledger) as base:
        held = [connect(base) for _ in range(2)]
        try:
            for connection in held:
                assert ask(connection) == b"HTTP/1.1 200 OK"
            with connect(base) as third:  # every one of this address's is busy: 503
                assert ask(third) == b"HTTP/1.1 503 Service Unavailable"
            with connect(base, "127.0.0.2") as other:  # another address is served
                assert ask(other) == b"HTTP/1.1 200 OK"
        finally:
            for connection in held:
                connection.close()
    monkeypatch.setenv("OUTCOMES_FORWARDED_ALLOW_IPS", "127.0.0.1")  # the proxy: exempt
    with background(ledger) as base:
        held = [connect(base) for _ in range(4)]
        try:
            for connection in held:
                assert ask(connection) == b"HTTP/1.1 200 OK"
        finally:
            for connection in held:
                connection.close()

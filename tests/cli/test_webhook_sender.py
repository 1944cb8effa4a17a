"""The relay's sender connects to the address the SSRF rule checked, never resolving the URL's
host again (DNS rebinding), while the request still names the host: `Host`, and for https
the TLS server name the certificate is checked against."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from cli.webhook_sender import HttpxSender, pinned
from ledger.errors import WebhookSendError


@pytest.fixture
def receiver() -> Iterator[tuple[int, list[str]]]:
    hosts: list[str] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers["Content-Length"]))
            hosts.append(self.headers["Host"])
            self.send_response(204)
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_address[1], hosts
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


def test_a_pinned_delivery_reaches_the_checked_address_by_the_urls_name(
    receiver: tuple[int, list[str]],
) -> None:
    port, hosts = receiver
    sender = HttpxSender()
    try:
        # `.invalid` never resolves: only a connection to the given address can succeed.
        url = f"http://hooks.invalid:{port}/outcomes"
        assert sender.post(url, b"{}", {}, timeout_s=10, address="127.0.0.1") == 204
    finally:
        sender.close()
    assert hosts == [f"hooks.invalid:{port}"]


def test_an_unpinned_delivery_resolves_the_name() -> None:
    sender = HttpxSender()
    try:
        with pytest.raises(WebhookSendError, match="ConnectError"):
            sender.post("http://hooks.invalid:9/", b"{}", {}, timeout_s=5)
    finally:
        sender.close()


def test_https_names_the_host_to_tls_and_ipv6_is_bracketed() -> None:
    target, headers, extensions = pinned("https://hooks.example/x?y=1", {"a": "b"}, "2001:db8::1")
    assert str(target) == "https://[2001:db8::1]/x?y=1"
    assert headers == {"a": "b", "Host": "hooks.example"}
    assert extensions == {"sni_hostname": "hooks.example"}
    target, headers, extensions = pinned("http://hooks.example:8080/", {}, None)
    assert (str(target), headers, extensions) == ("http://hooks.example:8080/", {}, {})

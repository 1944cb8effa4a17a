"""The relay's sender (issue 47, M2: one deadline over the whole attempt, a few KB of the
answer read) connects to the address the SSRF rule checked, never resolving the URL's
host again (DNS rebinding), while the request still names the host: `Host`, and for https
the TLS server name the certificate is checked against."""

from __future__ import annotations

import socket
import ssl
import threading
import time
import tracemalloc
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from cli.webhook_sender import MAX_ANSWER, WebhookSender
from ledger import webhook_targets
from ledger.errors import WebhookSendError
from tests.webhook_receiver import dripping, huge, raw_receiving


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
    # `.invalid` never resolves: only a connection to the given address can succeed.
    url = f"http://hooks.invalid:{port}/outcomes"
    assert WebhookSender().post(url, b"{}", {}, timeout_s=10, address="127.0.0.1") == 204
    assert hosts == [f"hooks.invalid:{port}"]


def test_an_unpinned_delivery_resolves_the_name() -> None:
    sender = WebhookSender()
    with pytest.raises(WebhookSendError, match="cannot connect"):
        sender.post("http://hooks.invalid:9/", b"{}", {}, timeout_s=5)


def self_signed(tmp_path: Path, name: str) -> tuple[Path, Path]:
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    moment = datetime.now(UTC)
    certificate = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(moment - timedelta(minutes=5))
        .not_valid_after(moment + timedelta(hours=1))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName(name)]), critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_file, key_file = tmp_path / "cert.pem", tmp_path / "key.pem"
    cert_file.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return cert_file, key_file


def test_https_connects_to_the_address_and_names_the_host_to_tls(tmp_path: Path) -> None:
    """SNI and the certificate check are the URL's host; the connection is the pinned
    address's; a certificate for another name is refused."""
    cert_file, key_file = self_signed(tmp_path, "hooks.example")
    served = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    served.load_cert_chain(cert_file, key_file)
    names: list[str | None] = []
    served.sni_callback = lambda _sock, name, _ctx: names.append(name)  # type: ignore[assignment,func-returns-value]
    server = ThreadingHTTPServer(("127.0.0.1", 0), _hosts_handler(hosts := []))
    server.socket = served.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    trusting = ssl.create_default_context(cafile=str(cert_file))
    port = server.server_address[1]
    try:
        sender = WebhookSender(trusting)
        url = f"https://hooks.example:{port}/x?y=1"
        assert sender.post(url, b"{}", {}, timeout_s=10, address="127.0.0.1") == 204
        with pytest.raises(WebhookSendError, match=r"CERTIFICATE_VERIFY_FAILED|match"):
            sender.post(f"https://other.example:{port}/", b"{}", {}, 10, "127.0.0.1")
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)
    assert names[:2] == ["hooks.example", "other.example"]
    assert hosts == [f"hooks.example:{port}"]


def _hosts_handler(hosts: list[str]) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers["Content-Length"]))
            hosts.append(self.headers["Host"])
            self.send_response(204)
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    return Handler


# --- M2: one deadline over the attempt, a few KB of the answer read -------------------------


def test_a_dripping_receiver_gets_the_deadline_not_a_delivery() -> None:
    """A status line dripped a byte every half second: each read is quick, the attempt is not
    (an HTTP client's per-read timeout never fires). It ends at its deadline, undelivered."""
    with raw_receiving(dripping) as url:
        started = time.monotonic()
        with pytest.raises(WebhookSendError, match="no answer within 2 s"):
            WebhookSender().post(url, b"{}", {}, timeout_s=2, address="127.0.0.1")
        assert time.monotonic() - started < 2 + 1  # the deadline, and a second to spare


def test_a_huge_answer_is_not_read_past_a_few_kilobytes() -> None:
    """A 2xx with a 100 MB body: the status counts, the body is left unread (the process's
    memory grows by far less than 50 MB, where the whole answer was read before)."""
    with raw_receiving(huge) as url:
        tracemalloc.start()
        try:
            status = WebhookSender().post(url, b"{}", {}, timeout_s=10, address="127.0.0.1")
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
    assert status == 200
    assert peak < 50 * 1024 * 1024, peak
    assert peak < MAX_ANSWER * 64  # in fact, a few KB and what the sender itself allocates


def test_the_name_of_an_allowed_host_is_resolved_within_the_deadline(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A name server that never answers: the attempt still ends at its deadline."""
    never = threading.Event()

    def hanging(host: str, port: int) -> list[str]:
        never.wait(30)
        return ["127.0.0.1"]

    monkeypatch.setattr(webhook_targets, "_resolve", hanging)
    started = time.monotonic()
    try:
        with pytest.raises(WebhookSendError, match="no answer within 1 s"):
            WebhookSender().post("http://hooks.example/", b"{}", {}, timeout_s=1)
        assert time.monotonic() - started < 1 + 1
    finally:
        never.set()


def test_the_answer_must_be_http() -> None:
    def garbage(connection: socket.socket, stopping: threading.Event) -> None:
        connection.sendall(b"x" * 10_000)

    def interim(connection: socket.socket, stopping: threading.Event) -> None:
        connection.sendall(b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 202 Accepted\r\n\r\n")

    def not_http(connection: socket.socket, stopping: threading.Event) -> None:
        connection.sendall(b"SSH-2.0-OpenSSH\r\n")

    with raw_receiving(garbage) as url, pytest.raises(WebhookSendError, match=r"^the answer's"):
        WebhookSender().post(url, b"{}", {}, timeout_s=5, address="127.0.0.1")
    with raw_receiving(not_http) as url, pytest.raises(WebhookSendError, match=r"^the answer is"):
        WebhookSender().post(url, b"{}", {}, timeout_s=5, address="127.0.0.1")
    with raw_receiving(interim) as url:
        assert WebhookSender().post(url, b"{}", {}, timeout_s=5, address="127.0.0.1") == 202

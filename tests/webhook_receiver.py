"""A webhook receiver for tests: a small threaded HTTP server on a loopback port that verifies
every delivery with the Standard Webhooks reference library, as a real receiver would, and
keeps what it got. `down` makes it answer 503 (an endpoint that is away)."""

from __future__ import annotations

import http.server
import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from standardwebhooks.webhooks import Webhook, WebhookVerificationError


@dataclass(frozen=True)
class Received:
    webhook_id: str
    body: str
    headers: dict[str, str]
    verified: bool


@dataclass
class Receiver:
    url: str = ""
    secret: str | None = None  # the registration's, once known
    down: bool = False
    refused: int = 0  # deliveries answered 503 while down
    got: list[Received] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def take(self, body: str, headers: dict[str, str]) -> int:
        if self.down:
            with self.lock:
                self.refused += 1
            return 503
        verified = True
        try:
            Webhook(self.secret or "whsec_").verify(body, headers)
        except WebhookVerificationError:
            verified = False
        with self.lock:
            self.got.append(Received(headers.get("webhook-id", ""), body, headers, verified))
        return 204 if verified else 400

    def unique(self) -> dict[str, Received]:
        """What it got, deduplicated by `webhook-id` (verified deliveries only)."""
        with self.lock:
            return {r.webhook_id: r for r in self.got if r.verified}


class _Server(http.server.ThreadingHTTPServer):
    # The standard library's backlog of 5 overflows when two relays deliver at once on a
    # loaded machine, and an overflowed connection is reset: a delivery the relay must retry.
    request_queue_size = 128


@contextmanager
def receiving() -> Iterator[Receiver]:
    receiver = Receiver()

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            length = int(self.headers.get("content-length", "0"))
            body = self.rfile.read(length).decode()
            status = receiver.take(body, {k.lower(): v for k, v in self.headers.items()})
            self.send_response(status)
            self.send_header("content-length", "0")
            self.end_headers()

        def log_message(self, format: str, *args: object) -> None:
            return None

    server = _Server(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    receiver.url = f"http://127.0.0.1:{server.server_address[1]}/hooks"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield receiver
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


@contextmanager
def raw_receiving(answer: Callable[[socket.socket, threading.Event], None]) -> Iterator[str]:
    """A receiver that answers each connection with `answer(connection, stopping)` after
    reading the request's first bytes: for receivers no real server would be (one dripping
    its answer, one answering 100 MB). Yields its URL."""
    listener = socket.create_server(("127.0.0.1", 0))
    stopping = threading.Event()
    requests: list[bytes] = []

    def serve(connection: socket.socket) -> None:
        with connection:
            try:
                connection.settimeout(10)
                requests.append(connection.recv(65536))
                answer(connection, stopping)
            except OSError:
                pass  # the sender gave up on it: what these receivers are for

    def accept() -> None:
        while not stopping.is_set():
            try:
                connection, _ = listener.accept()
            except OSError:
                return
            threading.Thread(target=serve, args=(connection,), daemon=True).start()

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}/hooks"
    finally:
        stopping.set()
        listener.close()
        thread.join(5)


def dripping(connection: socket.socket, stopping: threading.Event) -> None:
    """A status line a byte every half second, for a minute: never an answer in time."""
    for byte in b"HTTP/1.1 200 OK\r\n" * 10:
        if stopping.wait(0.5):
            return
        connection.sendall(bytes([byte]))


HUGE = 100 * 1024 * 1024


def huge(connection: socket.socket, stopping: threading.Event) -> None:
    """A 2xx answer with a 100 MB body, sent as fast as it is read."""
    connection.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % HUGE)
    block = bytes(64 * 1024)
    for _ in range(HUGE // len(block)):
        if stopping.is_set():
            return
        connection.sendall(block)


def wait_until(check: Callable[[], bool], timeout_s: float = 20.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.02)
    return check()

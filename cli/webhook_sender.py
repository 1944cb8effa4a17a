"""The webhook relay's `Sender`: one HTTP/1.1 POST per attempt over a socket of its own, with a
wall-clock deadline over the whole attempt and at most MAX_ANSWER bytes of the answer read
(docs/webhooks.md, "One attempt"; docs/security.md, M2).

Why not an HTTP client library: their timeouts bound each read, not the attempt, so a receiver
dripping a byte a second held an attempt as long as it liked; and they read the whole answer,
so a 100 MB one went into the serving process's memory. The relay needs only the status line.

- Connects to the address the SSRF rule checked (`address`), never resolving the URL's host
  again (DNS rebinding); `Host` and, for https, the TLS server name (SNI and the name the
  certificate is checked against) are the URL's own.
- Without `address` (a host in OUTCOMES_WEBHOOK_ALLOW_HOSTS), the name is resolved within the
  deadline too.
- Every socket operation is given what remains of the deadline, and a timer shuts the socket
  down when it passes, whatever is blocked on it (a TLS handshake dripped byte by byte).
- Redirects are never followed (the status is the answer); no proxy settings are read.
"""

from __future__ import annotations

import socket
import ssl
import threading
import time
from collections.abc import Mapping
from urllib.parse import urlsplit

from ledger.errors import WebhookSendError
from ledger.webhook_targets import resolve_within

MAX_ANSWER = 4096  # bytes of the answer read, at most: its status line is all that counts


class WebhookSender:
    def __init__(self, tls: ssl.SSLContext | None = None) -> None:
        self._tls = tls or ssl.create_default_context()  # the system's trusted roots

    def post(
        self,
        url: str,
        body: bytes,
        headers: Mapping[str, str],
        timeout_s: float,
        address: str | None = None,
    ) -> int:
        deadline = time.monotonic() + timeout_s
        parts = urlsplit(url)
        host = parts.hostname or ""
        port = parts.port or (443 if parts.scheme == "https" else 80)
        try:
            if address is None:
                address = _first(resolve_within(_left(deadline, timeout_s))(host, port))
            raw = socket.create_connection((address, port), timeout=_left(deadline, timeout_s))
        except OSError as exc:
            if time.monotonic() >= deadline:
                raise WebhookSendError(f"no answer within {timeout_s:g} s") from None
            raise WebhookSendError(f"cannot connect: {_reason(exc)}"[:300]) from None
        # Past the deadline, whatever is blocked on the socket returns (EOF or an error).
        watchdog = _Watchdog(raw, deadline)
        connection: socket.socket = raw
        try:
            if parts.scheme == "https":
                connection = self._tls.wrap_socket(raw, server_hostname=host)
            request = _request(parts.path or "/", parts.query, parts.netloc, body, headers)
            _send(connection, request, deadline, timeout_s)
            return _status(connection, deadline, timeout_s)
        except (OSError, ValueError) as exc:
            if time.monotonic() >= deadline:
                raise WebhookSendError(f"no answer within {timeout_s:g} s") from None
            said = str(exc) if isinstance(exc, ValueError) else _reason(exc)
            raise WebhookSendError(said[:300]) from None
        finally:
            watchdog.close(connection)

    def close(self) -> None:
        """Nothing is kept between attempts (each has its connection)."""


class _Watchdog:
    """Shuts the connection's socket down at the deadline. By its file descriptor: a TLS
    wrapper takes the socket object over; and under a lock with the close, so that a
    descriptor already closed (and perhaps reused) is never touched."""

    def __init__(self, raw: socket.socket, deadline: float) -> None:
        self._fd = raw.fileno()
        self._lock = threading.Lock()
        self._closed = False
        self._timer = threading.Timer(max(0.0, deadline - time.monotonic()), self._fire)
        self._timer.daemon = True
        self._timer.start()

    def _fire(self) -> None:
        with self._lock:
            if self._closed:
                return
            view = socket.socket(fileno=self._fd)
            try:
                view.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            finally:
                view.detach()  # the descriptor stays the connection's to close

    def close(self, connection: socket.socket) -> None:
        self._timer.cancel()
        with self._lock:
            self._closed = True
            connection.close()


def _first(addresses: object) -> str:
    found = list(addresses)  # type: ignore[call-overload]
    if not found:
        raise OSError("the host does not resolve")
    return str(found[0])


def _left(deadline: float, timeout_s: float) -> float:
    left = deadline - time.monotonic()
    if left <= 0:
        raise TimeoutError(f"no answer within {timeout_s:g} s")
    return left


def _reason(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


def _request(path: str, query: str, netloc: str, body: bytes, headers: Mapping[str, str]) -> bytes:
    # The URL passed the SSRF rule's parse: no spaces or control characters anywhere in it.
    target = f"{path}?{query}" if query else path
    lines = [f"POST {target} HTTP/1.1", f"Host: {netloc}"]
    lines += [f"{name}: {value}" for name, value in headers.items() if name.lower() != "host"]
    lines += [f"Content-Length: {len(body)}", "Connection: close", "", ""]
    return "\r\n".join(lines).encode("latin-1") + body


def _send(connection: socket.socket, data: bytes, deadline: float, timeout_s: float) -> None:
    view = memoryview(data)
    while view:
        connection.settimeout(_left(deadline, timeout_s))
        sent = connection.send(view)
        view = view[sent:]


def _status(connection: socket.socket, deadline: float, timeout_s: float) -> int:
    """The final status of the answer, read from at most MAX_ANSWER bytes (interim 1xx
    answers skipped)."""
    answer = b""
    while len(answer) < MAX_ANSWER:
        connection.settimeout(_left(deadline, timeout_s))
        chunk = connection.recv(MAX_ANSWER - len(answer))
        if not chunk:
            if time.monotonic() >= deadline:
                raise TimeoutError
            raise ConnectionError("the receiver closed the connection without an answer")
        answer += chunk
        while b"\r\n" in answer:
            line = answer.partition(b"\r\n")[0]
            status = _status_code(line)
            if status >= 200:
                return status
            head_end = answer.find(b"\r\n\r\n")  # an interim answer: skip its headers
            if head_end < 0:
                break
            answer = answer[head_end + 4 :]
    raise ValueError(f"the answer's first {MAX_ANSWER} bytes hold no HTTP status line")


def _status_code(line: bytes) -> int:
    version, _, rest = line.partition(b" ")
    code = rest[:3]
    if not version.startswith(b"HTTP/1.") or len(code) != 3 or not code.isdigit():
        raise ValueError("the answer is not HTTP/1.1")
    return int(code)

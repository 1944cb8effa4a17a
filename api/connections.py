"""Connections that never ask cannot take the API offline (docs/deploy.md, "Connections";
docs/security.md, M1).

uvicorn counts every open connection toward its cap (OUTCOMES_MAX_CONNECTIONS) and closes one
that never sends a byte only when the client does: a thousand idle sockets, no token needed,
made every request a 503. Its HTTP protocol, extended here, adds three rules:

- **A header timer from the connect.** A connection must have sent its request's whole headers
  within OUTCOMES_HEADER_TIMEOUT_S of opening (for a later request on a kept-alive connection:
  of that request's first byte); otherwise it is closed. Dripping a byte at a time does not
  re-arm it.
- **A cap per client address.** One address holds at most OUTCOMES_MAX_CONNECTIONS_PER_CLIENT
  connections; past it, its oldest connection that has not yet asked anything is closed to
  make room, and when every one has asked, the new connection's request is answered 503.
  The proxies in OUTCOMES_FORWARDED_ALLOW_IPS are exempt (their clients share their address).
- **Idle ones make room.** When the process is at its cap, the oldest connection (any
  address) that has not yet asked anything is closed for the newcomer; only connections that
  asked count toward the 503 uvicorn answers past the cap.
"""

from __future__ import annotations

import asyncio
import ipaddress
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from ledger.settings import Settings


@dataclass
class ConnectionTable:
    """The open connections of one server, oldest first, and how many each address holds."""

    max_connections: int
    per_client: int
    header_timeout_s: float
    exempt: tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...] = ()
    exempt_all: bool = False
    open: dict[GuardedProtocol, str | None] = field(default_factory=dict)
    by_address: Counter[str] = field(default_factory=Counter)

    @classmethod
    def from_settings(cls, settings: Settings) -> ConnectionTable:
        allowed = settings.forwarded_allow_ips
        return cls(
            max_connections=settings.max_connections,
            per_client=min(settings.max_connections_per_client, settings.max_connections),
            header_timeout_s=settings.header_timeout_s,
            exempt=tuple(ipaddress.ip_network(a, strict=False) for a in allowed if a != "*"),
            exempt_all="*" in allowed,
        )

    def is_exempt(self, address: str) -> bool:
        if self.exempt_all:
            return True
        try:
            ip = ipaddress.ip_address(address)
        except ValueError:  # a Unix socket's peer, say: no address to count
            return True
        return any(ip in network for network in self.exempt)

    def admit(self, connection: GuardedProtocol) -> bool:
        """Record a new connection, closing an idle one to make room where a cap is reached;
        False when its address is at its cap with every connection busy (answer it 503)."""
        address = connection.client[0] if connection.client else None
        counted = address if address is not None and not self.is_exempt(address) else None
        self.open[connection] = counted
        admitted = True
        if counted is not None:
            self.by_address[counted] += 1
            if self.by_address[counted] > self.per_client:
                admitted = self._evict(connection, counted)
        if len(self.open) > self.max_connections:
            self._evict(connection, None)
        return admitted

    def forget(self, connection: GuardedProtocol) -> None:
        if connection not in self.open:
            return
        counted = self.open.pop(connection)
        if counted is not None:
            self.by_address[counted] -= 1
            if self.by_address[counted] <= 0:
                del self.by_address[counted]

    def _evict(self, newcomer: GuardedProtocol, address: str | None) -> bool:
        """Close the oldest connection (of `address`, or any) that has not asked anything."""
        for connection, counted in self.open.items():
            if connection is newcomer or connection.asked:
                continue
            if address is None or counted == address:
                connection.drop()
                return True
        return False


class GuardedProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol with the header timer and the table above."""

    table: ConnectionTable

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.asked = False  # has sent a request's whole headers
        self._refused = False
        self._header_timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._refused = not self.table.admit(self)
        if not transport.is_closing():
            self._arm()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        self.table.forget(self)
        super().connection_lost(exc)

    def on_message_begin(self) -> None:
        super().on_message_begin()
        if self._header_timer is None:  # a later request on a kept-alive connection
            self._arm()

    def on_headers_complete(self) -> None:
        self.asked = True
        self._disarm()
        if self._refused:
            # uvicorn's own 503 (`Connection: close`) for a request past a cap.
            self.limit_concurrency = 0
        super().on_headers_complete()

    def handle_websocket_upgrade(self) -> None:
        self._disarm()
        self.table.forget(self)
        super().handle_websocket_upgrade()

    def drop(self) -> None:
        """Close a connection that asked nothing (made room for another)."""
        self._disarm()
        self.table.forget(self)
        self.connections.discard(self)  # its slot is free now, not once the loop notices
        if not self.transport.is_closing():
            self.transport.close()

    def _arm(self) -> None:
        self._header_timer = self.loop.call_later(self.table.header_timeout_s, self._too_slow)

    def _disarm(self) -> None:
        if self._header_timer is not None:
            self._header_timer.cancel()
            self._header_timer = None

    def _too_slow(self) -> None:
        self._header_timer = None
        if not self.transport.is_closing():
            self.transport.close()


def guarded_protocol(settings: Settings) -> type[GuardedProtocol]:
    """A protocol class for one server (uvicorn builds one instance per connection)."""
    table = ConnectionTable.from_settings(settings)
    return type("GuardedProtocol", (GuardedProtocol,), {"table": table})

"""Where a webhook may point (docs/webhooks.md, "SSRF"): http or https only, no credentials in
the URL, and a host that resolves only to public addresses: never this host's own, loopback,
link-local, a private or shared range, multicast or reserved. An IPv6 address that carries an
IPv4 one (IPv4-mapped and -compatible `::a.b.c.d`, NAT64 `64:ff9b::/96`, 6to4 `2002::/16`,
Teredo) is judged by the IPv4 address it reaches. Checked at registration and again before
every attempt (DNS can change). Hosts named in OUTCOMES_WEBHOOK_ALLOW_HOSTS are exempt (tests,
receivers inside the network).

A refused name is not told apart from one that does not resolve, and the address it resolves
to is never said: the refusal reveals nothing of the network's own DNS (operators see the
address in the log).
"""

from __future__ import annotations

import functools
import ipaddress
import logging
import socket
import threading
from collections.abc import Callable, Iterable
from urllib.parse import urlsplit

from ledger.errors import WebhookTargetError

log = logging.getLogger(__name__)
MAX_URL = 2000
Address = ipaddress.IPv4Address | ipaddress.IPv6Address
Resolve = Callable[[str, int], Iterable[str]]


MAX_PENDING_LOOKUPS = 32  # name resolutions given up on but still running, at most


def _resolve(host: str, port: int) -> list[str]:
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return [str(info[4][0]) for info in infos]


_pending = threading.BoundedSemaphore(MAX_PENDING_LOOKUPS)


def resolve_within(timeout_s: float) -> Resolve:
    """`_resolve` bounded in time: the system resolver has no deadline of its own (a name
    server that never answers holds getaddrinfo for its retries), so it runs on a thread of
    its own and is given up on at the deadline (OSError). A lookup given up on finishes on its
    own; past MAX_PENDING_LOOKUPS of them, new ones are refused at once."""

    def resolve(host: str, port: int) -> list[str]:
        if not _pending.acquire(blocking=False):
            raise OSError("too many name resolutions pending")
        found: list[str] = []
        failed: list[BaseException] = []
        done = threading.Event()

        def lookup() -> None:
            try:
                found.extend(_resolve(host, port))
            except (OSError, UnicodeError) as exc:
                failed.append(exc)
            finally:
                _pending.release()
                done.set()

        threading.Thread(target=lookup, name="webhook-dns", daemon=True).start()
        if not done.wait(max(0.0, timeout_s)):
            raise OSError(f"no answer within {timeout_s:g} s")
        if failed:
            raise failed[0]
        return found

    return resolve


@functools.cache
def own_addresses() -> frozenset[str]:
    """This host's addresses, as its own name resolves (cached: it does not move)."""
    try:
        return frozenset(_resolve(socket.gethostname(), 0))
    except OSError:
        return frozenset()


def parse_target(url: str) -> tuple[str, int]:
    """The URL's host (lowercase) and port; WebhookTargetError when it is no webhook URL."""
    if len(url) > MAX_URL or any(ord(c) < 33 for c in url):
        raise WebhookTargetError(f"a webhook URL is at most {MAX_URL} characters, no spaces")
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        raise WebhookTargetError("the webhook URL cannot be read") from None
    if parts.scheme not in ("http", "https"):
        raise WebhookTargetError("a webhook URL is http:// or https://")
    if not parts.hostname:
        raise WebhookTargetError("the webhook URL names no host")
    if parts.username is not None or parts.password is not None:
        raise WebhookTargetError("a webhook URL carries no credentials (they would rest in clear)")
    return parts.hostname.lower(), port or (443 if parts.scheme == "https" else 80)


NAT64 = ipaddress.IPv6Network("64:ff9b::/96")  # RFC 6052's well-known prefix
NAT64_LOCAL = ipaddress.IPv6Network("64:ff9b:1::/48")  # RFC 8215: a network's own translators
IPV4_COMPATIBLE = ipaddress.IPv6Network("::/96")  # RFC 4291's deprecated `::a.b.c.d`


def embedded_ipv4(ip: ipaddress.IPv6Address) -> ipaddress.IPv4Address | None:
    """The IPv4 address an IPv6 one reaches through a translator or a tunnel, or None."""
    if ip.ipv4_mapped is not None:
        return ip.ipv4_mapped
    if ip.sixtofour is not None:
        return ip.sixtofour
    if ip.teredo is not None:
        return ip.teredo[1]  # the client's address (the server's relays to it)
    if ip in NAT64 or (ip in IPV4_COMPATIBLE and int(ip) > 1):  # `::` and `::1` are not
        return ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
    return None


def refusal(address: str) -> str | None:
    """Why an address is not a webhook's to reach, or None."""
    ip: Address = ipaddress.ip_address(address.split("%", 1)[0])
    if isinstance(ip, ipaddress.IPv6Address):
        if ip in NAT64_LOCAL:
            return "a private or reserved address"
        ip = embedded_ipv4(ip) or ip
    if ip.is_loopback:
        return "a loopback address"
    if ip.is_link_local:
        return "a link-local address"
    if ip.is_multicast:
        return "a multicast address"
    if ip.is_private or not ip.is_global:
        return "a private or reserved address"
    if str(ip) in own_addresses() or address in own_addresses():
        return "this host's own address"
    return None


def check_target(url: str, allow_hosts: frozenset[str], resolve: Resolve = _resolve) -> str | None:
    """Raise WebhookTargetError unless `url` may receive deliveries now; else the checked
    address to connect to (None for an allowed host: connect by its name). A delivery
    connects to that very address, never resolving the name again: a DNS answer that changes
    between the check and the connection (DNS rebinding) cannot steer it inside."""
    host, port = parse_target(url)
    bare = host.strip("[]")
    if host in allow_hosts or bare in allow_hosts:
        return None
    if _is_address(bare):  # the caller wrote the address: saying what it is reveals nothing
        why = refusal(bare)
        if why is not None:
            raise WebhookTargetError(
                f"the webhook host {host} is {why}; list it in OUTCOMES_WEBHOOK_ALLOW_HOSTS to "
                "allow it"
            )
        return bare
    try:
        addresses = list(resolve(bare, port))
    except (OSError, UnicodeError):
        addresses = []
    refused = [(a, why) for a in addresses if (why := refusal(a)) is not None]
    if not addresses or refused:
        if refused:  # for operators: the address, which the account is not told
            log.info("webhook host %s refused: %s (%s)", host, refused[0][1], refused[0][0])
        raise WebhookTargetError(
            f"the webhook host {host} does not resolve to public addresses only (whether it "
            "resolves, and to what, is not said); list it in OUTCOMES_WEBHOOK_ALLOW_HOSTS to "
            "allow it"
        )
    return addresses[0]


def _is_address(host: str) -> bool:
    try:
        ipaddress.ip_address(host.split("%", 1)[0])
    except ValueError:
        return False
    return True

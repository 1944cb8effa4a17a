"""Which browser pages may talk to this server: the rules for the `Origin` and `Host` headers,
shared by the console's forms and MCP over HTTP (each adapter applies them to its requests).

Pure string logic, no framework: the settings check the configured values with the same
parsers, so a value that loads is a value these rules understand.

- An origin is `scheme://host[:port]` (RFC 6454): http or https, a host, an optional port, no
  path. Compared in their canonical form: lower case, the scheme's default port left out.
- A request's own origin is the one whose host and port are the request's `Host`: a page of
  this server. Its scheme may be the request's, or https when the request arrived as http (a
  proxy in front terminated TLS and was not trusted to say so); never http for a request that
  arrived as https (a downgrade).
- Loopback names (`localhost` and loopback addresses: `127.0.0.1`, `[::1]`, …) can only be
  this machine: a DNS-rebinding page carries its own name in `Host`, never one of these.
"""

from __future__ import annotations

import ipaddress
import re

SCHEMES = {"http": 80, "https": 443}
LOOPBACK_NAMES = frozenset({"localhost", "127.0.0.1", "[::1]"})
# A DNS name (letters, digits, hyphens, dots) or a bracketed IPv6 address; an IPv4 address is
# a DNS-looking name too.
_LABEL = r"[a-z0-9_](?:[a-z0-9_-]{0,61}[a-z0-9_])?"  # docker names may hold "_"
_HOST = re.compile(rf"^(?:{_LABEL}(?:\.{_LABEL})*|\[[0-9a-f:.]+\])$")
_AUTHORITY = re.compile(r"^(?P<host>\[[^\]]*\]|[^:\[\]]*)(?::(?P<port>[0-9]{1,5}))?$")


def split_authority(authority: str) -> tuple[str, int | None] | None:
    """`host[:port]` as (lower-case host, port or None); None when it is not one."""
    found = _AUTHORITY.match(authority.strip().lower())
    if found is None:
        return None
    host, port = found["host"], found["port"]
    if not _HOST.match(host) or (host.startswith("[") and not _ipv6(host[1:-1])):
        return None
    if port is not None and not 0 < int(port) <= 65535:
        return None
    return host, None if port is None else int(port)


def _ipv6(text: str) -> bool:
    try:
        ipaddress.IPv6Address(text)
    except ValueError:
        return False
    return True


def parse_origin(origin: str) -> tuple[str, str, int] | None:
    """An origin as (scheme, host, port) with the default port filled in; None for anything
    else (`null`, a path, another scheme, a malformed host)."""
    scheme, sep, rest = origin.strip().lower().partition("://")
    if not sep or scheme not in SCHEMES or not rest or "/" in rest or "@" in rest:
        return None
    split = split_authority(rest)
    if split is None:
        return None
    host, port = split
    return scheme, host, SCHEMES[scheme] if port is None else port


def canonical_origin(origin: str) -> str | None:
    """The origin as browsers send it (lower case, no default port), or None if it is none."""
    parsed = parse_origin(origin)
    if parsed is None:
        return None
    scheme, host, port = parsed
    return f"{scheme}://{host}" if port == SCHEMES[scheme] else f"{scheme}://{host}:{port}"


def is_own_origin(origin: str, host_header: str | None, request_scheme: str) -> bool:
    """Whether `origin` is this server's, as the request reached it (see the module's doc)."""
    parsed = parse_origin(origin)
    if parsed is None or not host_header:
        return False
    scheme, host, port = parsed
    if scheme != request_scheme and not (scheme == "https" and request_scheme == "http"):
        return False
    split = split_authority(host_header)
    if split is None:
        return False
    own_host, own_port = split
    # A Host without a port names the default port of the scheme the page was served with.
    return own_host == host and (own_port if own_port is not None else SCHEMES[scheme]) == port


def origin_allowed(
    origin: str,
    host_header: str | None,
    request_scheme: str,
    allowed: frozenset[str],
    *,
    loopback: bool = False,
) -> bool:
    """This server's own origin, one of `allowed` (canonical origins), or with `loopback` a
    page served from this machine's loopback names (any port)."""
    if is_own_origin(origin, host_header, request_scheme):
        return True
    canonical = canonical_origin(origin)
    if canonical is None:
        return False
    if canonical in allowed:
        return True
    parsed = parse_origin(canonical)
    return loopback and parsed is not None and is_loopback_name(parsed[1])


def host_allowed(host_header: str | None, allowed: frozenset[str], on_loopback: bool) -> bool:
    """Whether a request naming `host_header` is for this server.

    Loopback names always are. Beyond them: the names in `allowed` when there are any; when
    there are none, any name, except on a connection to a loopback address (a server only this
    machine reaches: a foreign name there is a DNS-rebinding page)."""
    if not host_header:
        return False
    split = split_authority(host_header)
    if split is None:
        return False
    host = split[0]
    if is_loopback_name(host):
        return True
    if allowed:
        return host in allowed
    return not on_loopback


def is_loopback_name(host: str) -> bool:
    """`localhost`, or a loopback address (IPv6 in brackets, as in a Host or an origin)."""
    return host in LOOPBACK_NAMES or is_loopback_address(host)


def is_loopback_address(address: str | None) -> bool:
    if not address:
        return False
    try:
        return ipaddress.ip_address(address.strip("[]")).is_loopback
    except ValueError:
        return False

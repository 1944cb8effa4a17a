"""The Origin and Host rules the console's forms and MCP over HTTP share (ledger.web_origins)."""

from __future__ import annotations

import pytest

from ledger.web_origins import (
    canonical_origin,
    host_allowed,
    is_loopback_address,
    is_own_origin,
    origin_allowed,
    split_authority,
)

NONE: frozenset[str] = frozenset()


@pytest.mark.parametrize(
    ("origin", "canonical"),
    [
        ("https://Ledger.Example.com", "https://ledger.example.com"),
        ("https://ledger.example.com:443", "https://ledger.example.com"),
        ("http://ledger.example.com:80", "http://ledger.example.com"),
        ("http://ledger.example.com:8080", "http://ledger.example.com:8080"),
        ("http://[::1]:8000", "http://[::1]:8000"),
        ("http://outcomes_api:8000", "http://outcomes_api:8000"),
        ("null", None),
        ("file://", None),
        ("ftp://ledger.example.com", None),
        ("https://ledger.example.com/", None),
        ("https://user@ledger.example.com", None),
        ("https://ledger.example.com:0", None),
        ("https://ledger.example.com:99999", None),
        ("https://[not-ipv6]", None),
        ("https://", None),
        ("https://a..b", None),
    ],
)
def test_origins_are_compared_in_their_canonical_form(origin: str, canonical: str | None) -> None:
    assert canonical_origin(origin) == canonical


def test_a_servers_own_origin_is_the_one_its_host_names() -> None:
    assert is_own_origin("http://127.0.0.1:8000", "127.0.0.1:8000", "http")
    assert is_own_origin("https://ledger.example.com", "ledger.example.com", "https")
    assert is_own_origin("https://ledger.example.com", "ledger.example.com:443", "https")
    # TLS ended in front of us by a proxy we were not told to trust: we see http.
    assert is_own_origin("https://ledger.example.com", "ledger.example.com", "http")
    assert not is_own_origin("http://ledger.example.com", "ledger.example.com", "https")
    assert not is_own_origin("http://127.0.0.1:8001", "127.0.0.1:8000", "http")
    assert not is_own_origin("http://evil.example", "ledger.example.com", "http")
    assert not is_own_origin("http://ledger.example.com", None, "http")
    assert not is_own_origin("http://ledger.example.com", "ledger.example.com:x", "http")


def test_other_origins_pass_when_listed_or_on_loopback_when_asked() -> None:
    listed = frozenset({"https://agents.example"})
    assert origin_allowed("https://AGENTS.example:443", "ledger", "http", listed)
    assert not origin_allowed("https://agents.example:8443", "ledger", "http", listed)
    assert not origin_allowed("http://localhost:6274", "ledger", "http", NONE)
    assert origin_allowed("http://localhost:6274", "ledger", "http", NONE, loopback=True)
    assert origin_allowed("http://127.0.0.9:3000", "ledger", "http", NONE, loopback=True)
    assert not origin_allowed("http://localhost.evil.example", "x", "http", NONE, loopback=True)
    assert not origin_allowed("null", "ledger", "http", listed, loopback=True)


def test_hosts() -> None:
    assert split_authority("Ledger.Example.com:8000") == ("ledger.example.com", 8000)
    assert split_authority("[::1]:8000") == ("[::1]", 8000)
    assert split_authority("ledger example") is None
    listed = frozenset({"ledger.example.com"})
    # Loopback names always; a listed name; any name unless the connection is on loopback.
    for on_loopback in (True, False):
        assert host_allowed("localhost:8000", NONE, on_loopback)
        assert host_allowed("[::1]:8000", listed, on_loopback)
        assert host_allowed("127.0.0.1", listed, on_loopback)
        assert host_allowed("ledger.example.com:8000", listed, on_loopback)
        assert not host_allowed("evil.example", listed, on_loopback)
        assert not host_allowed(None, NONE, on_loopback)
        assert not host_allowed("bad host", NONE, on_loopback)
    assert host_allowed("evil.example:8000", NONE, on_loopback=False)
    assert not host_allowed("evil.example:8000", NONE, on_loopback=True)
    assert is_loopback_address("127.0.0.1") and is_loopback_address("::1")
    assert not is_loopback_address("10.0.0.1") and not is_loopback_address("testserver")

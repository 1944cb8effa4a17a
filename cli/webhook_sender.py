"""The webhook relay's `Sender` over httpx: one client per relay (connections are kept),
redirects never followed (a redirect could lead past the SSRF rule) and no proxy settings
from the environment (a delivery goes where its URL says)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import httpx

from ledger.errors import WebhookSendError


class HttpxSender:
    def __init__(self) -> None:
        self._client = httpx.Client(follow_redirects=False, trust_env=False)

    def post(
        self,
        url: str,
        body: bytes,
        headers: Mapping[str, str],
        timeout_s: float,
        address: str | None = None,
    ) -> int:
        target, sent, extensions = pinned(url, headers, address)
        try:
            answer = self._client.post(
                target, content=body, headers=sent, timeout=timeout_s, extensions=extensions
            )
        except httpx.HTTPError as exc:
            raise WebhookSendError(f"{type(exc).__name__}: {exc}"[:300]) from None
        return answer.status_code

    def close(self) -> None:
        self._client.close()


def pinned(
    url: str, headers: Mapping[str, str], address: str | None
) -> tuple[httpx.URL, dict[str, str], dict[str, Any]]:
    """The request to send so that it connects to `address` and still names the URL's host:
    the URL with the address as its host, `Host` the URL's own, and for https the TLS server
    name (SNI, and the name the certificate is checked against) the URL's host."""
    original = httpx.URL(url)
    sent = dict(headers)
    if address is None:
        return original, sent, {}
    host = f"[{address}]" if ":" in address else address
    sent["Host"] = original.netloc.decode("ascii")
    extensions: dict[str, Any] = {}
    if original.scheme == "https":
        extensions["sni_hostname"] = original.host
    return original.copy_with(host=host.strip("[]")), sent, extensions

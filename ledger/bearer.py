"""The `WWW-Authenticate` challenge of a 401, shared by the API and the MCP door."""

from __future__ import annotations


def bearer_challenge(presented: bool, realm: str | None = None) -> str:
    """RFC 6750 §3: a token presented and refused (unknown, revoked) is
    `error="invalid_token"`, so a client knows the token is wrong and stops there (rather than
    starting OAuth discovery); a request without a token gets the scheme and no error code."""
    params = [f'realm="{realm}"'] if realm else []
    if presented:
        params.append('error="invalid_token"')
    return "Bearer " + ", ".join(params) if params else "Bearer"

"""Opaque cursors for the changes feed (`GET /v1/jobs?after=CURSOR`).

The feed pages by ledger position (positions are handed out in commit order, so a reader that
follows them never misses a change), but a position tells the volume of the whole ledger, every
account's. So callers get the position encrypted: a random nonce, the position XORed with an
HMAC-SHA256 keystream of that nonce, and an HMAC tag over both. Without the key a cursor says
nothing (two cursors for the same position differ); a cursor that was not issued under the key
is refused, never read as some position.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import os

from ledger.errors import InvalidCursorError

_NONCE, _POSITION, _TAG = 8, 8, 12
CURSOR_PATTERN = r"^[A-Za-z0-9_-]{1,64}$"


def cursor_key(secret: bytes) -> bytes:
    """The key, from the ledger's own secret (made at migrate; every API process reads the
    same one, callers never see it), kept apart from its other uses by a label."""
    return hmac.new(secret, b"outcomes changes-feed cursor", hashlib.sha256).digest()


def issue_cursor(position: int, key: bytes) -> str:
    """The opaque cursor for `position`: a fresh nonce each time, the same position inside."""
    nonce = os.urandom(_NONCE)
    body = nonce + _xor(position.to_bytes(_POSITION, "big"), _stream(key, nonce))
    raw = body + _tag(key, body)
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def position_of(cursor: str, key: bytes) -> int:
    """The position inside a cursor this ledger issued; InvalidCursorError for any other."""
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
    except (binascii.Error, ValueError):
        raise InvalidCursorError() from None
    body, tag = raw[: _NONCE + _POSITION], raw[_NONCE + _POSITION :]
    if len(raw) != _NONCE + _POSITION + _TAG or not hmac.compare_digest(tag, _tag(key, body)):
        raise InvalidCursorError()
    nonce, sealed = body[:_NONCE], body[_NONCE:]
    return int.from_bytes(_xor(sealed, _stream(key, nonce)), "big")


def _stream(key: bytes, nonce: bytes) -> bytes:
    return hmac.new(key, b"position" + nonce, hashlib.sha256).digest()[:_POSITION]


def _tag(key: bytes, body: bytes) -> bytes:
    return hmac.new(key, b"tag" + body, hashlib.sha256).digest()[:_TAG]


def _xor(a: bytes, b: bytes) -> bytes:
    return bytes(x ^ y for x, y in zip(a, b, strict=True))

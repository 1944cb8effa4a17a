"""Request-body limits, enforced before a body is parsed whole (contract §6).

- Size: a declared Content-Length over the cap is answered 413 before a byte is read; a body
  without one (chunked) is counted while it streams and cut off at the cap.
- Depth: a regex tokenizer skips strings and counts brackets, so a deeply nested document is
  refused (422) without ever reaching the JSON parser or a recursive validator.
- Media type: only a JSON body is read (415 otherwise), whatever its bytes look like.
- Integers: one beyond 64 bits is refused (422); the parser would make it a float, and two
  different bodies could then hash as the same request.
- Syntax: a body that is not well-formed JSON is a 400 (a well-formed one that breaks the
  schema is a 422).
"""

from __future__ import annotations

import re
from typing import Any

import orjson
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from api.problems import (
    invalid_input,
    malformed_json,
    problem_response,
    too_large,
    unsupported_media_type,
)
from ledger.json_limits import INT64, MAX_JSON_DEPTH

MAX_BODY_BYTES = 256 * 1024

# A whole string (possessive: no backtracking, so linear), a bracket, or a quote that never
# closes (the body is malformed; the parser will say so, no need to scan further).
_TOKEN = re.compile(rb'(?P<s>"(?:[^"\\]|\\.)*+")|(?P<o>[\[{])|(?P<c>[\]}])|(?P<u>")', re.DOTALL)


# A whole string (skipped), a number (its fraction and exponent kept apart: only a number
# without either is an integer), or a quote that never closes.
_NUMBER = re.compile(
    rb'(?P<s>"(?:[^"\\]|\\.)*+")'
    rb"|(?P<i>-?[0-9]++)(?P<f>(?:\.[0-9]*+)?(?:[eE][+-]?[0-9]*+)?)"
    rb'|(?P<u>")',
    re.DOTALL,
)


def has_integer_beyond_64_bits(body: bytes) -> bool:
    for match in _NUMBER.finditer(body):
        digits = match["i"]
        if digits is not None:
            if not match["f"] and len(digits) > 18 and _beyond_64_bits(digits):
                return True
        elif match["u"] is not None:
            return False
    return False


def _beyond_64_bits(digits: bytes) -> bool:
    # 2**63 has 19 digits; a longer literal is never converted (int() refuses huge ones).
    return len(digits.lstrip(b"-")) > 19 or int(digits) not in INT64


def is_json_media_type(content_type: str) -> bool:
    """application/json or application/<something>+json, parameters (charset) aside."""
    media = content_type.partition(";")[0].strip().lower()
    return media == "application/json" or (
        media.startswith("application/") and media.endswith("+json")
    )


def nests_deeper_than(body: bytes, limit: int) -> bool:
    depth = 0
    for match in _TOKEN.finditer(body):
        kind = match.lastgroup
        if kind == "o":
            depth += 1
            if depth > limit:
                return True
        elif kind == "c":
            depth -= 1
        elif kind == "u":
            return False
    return False


class BodyLimitMiddleware:
    """Pure ASGI, so that it sees the body stream before any framework buffering."""

    def __init__(self, app: ASGIApp, max_bytes: int = MAX_BODY_BYTES) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = _content_length(scope)
        if declared is not None and declared > self.max_bytes:
            await problem_response(too_large(self.max_bytes))(scope, receive, send)
            return
        received = 0

        async def capped() -> Message:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.max_bytes:
                    raise too_large(self.max_bytes)  # answered by the ApiProblem handler
            return message

        await self.app(scope, capped, send)


def _content_length(scope: Scope) -> int | None:
    for name, value in scope["headers"]:
        if name == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None
    return None


def json_of(content_type: str, body: bytes, max_depth: int = MAX_JSON_DEPTH) -> Any:
    """The request's JSON document, or a problem naming what is wrong with it (400, 415, 422)."""
    if not is_json_media_type(content_type):
        raise unsupported_media_type()
    if not body.strip():
        raise invalid_input("The request needs a JSON body.", missing=True)
    if nests_deeper_than(body, max_depth):
        raise invalid_input(f"The JSON body nests deeper than {max_depth} levels.")
    if has_integer_beyond_64_bits(body):
        raise invalid_input(
            "The JSON body holds an integer beyond 64 bits.",
            fix="send integers between -2**63 and 2**63-1, or large numbers as strings",
        )
    try:
        return orjson.loads(body)
    except orjson.JSONDecodeError:
        raise malformed_json() from None

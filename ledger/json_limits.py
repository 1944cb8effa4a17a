"""What a JSON document may hold, whichever door it came through: the HTTP API checks the bytes
before parsing (`api.limits`); the MCP door, whose SDK has parsed them already, checks the
value with `value_refusal`, so an agent meets the same rules on both."""

from __future__ import annotations

import math
from typing import Any

MAX_JSON_DEPTH = 32
INT64 = range(-(2**63), 2**63)


def value_refusal(value: Any, max_depth: int = MAX_JSON_DEPTH, depth: int = 1) -> str | None:
    """Why a parsed JSON value would be refused at the HTTP door, or None: nesting deeper than
    `max_depth` (`value` itself a container at `depth`), a number that is not finite (NaN,
    Infinity: not JSON, RFC 8259), or an integer beyond 64 bits. Iterative: a deep value
    cannot exhaust the stack."""
    stack: list[tuple[Any, int]] = [(value, depth)]
    while stack:
        item, level = stack.pop()
        if isinstance(item, dict | list):
            if level > max_depth:
                return f"nesting deeper than {max_depth} levels"
            children = item.values() if isinstance(item, dict) else item
            stack.extend((child, level + 1) for child in children)
        elif isinstance(item, float) and not math.isfinite(item):
            return "a number that is not finite (NaN and Infinity are not JSON)"
        elif isinstance(item, int) and not isinstance(item, bool) and item not in INT64:
            return "an integer beyond 64 bits"
    return None

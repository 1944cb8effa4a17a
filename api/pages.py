"""Cursor pages (`{items, next_cursor, count, truncated}`) and fast JSON answers.

A page is cut by `limit` and by a byte budget, and says so: `truncated` is true whenever
more rows follow, so a client keeps reading from `next_cursor` until it is false.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import orjson
from starlette.responses import Response

PAGE_BUDGET_BYTES = 1024 * 1024


def json_response(content: Any, status: int = 200) -> Response:
    return Response(
        orjson.dumps(content, option=orjson.OPT_UTC_Z), status, media_type="application/json"
    )


def page(
    items: list[dict[str, Any]], limit: int, after: Any, cursors: Sequence[Any]
) -> dict[str, Any]:
    """`items` holds up to limit + 1 rows in cursor order, `cursors` each one's cursor: the
    extra row tells that more follow."""
    truncated = len(items) > limit
    kept: list[dict[str, Any]] = []
    size = 0
    for item in items[:limit]:
        size += len(orjson.dumps(item))
        if kept and size > PAGE_BUDGET_BYTES:
            truncated = True
            break
        kept.append(item)
    return {
        "items": kept,
        "next_cursor": cursors[len(kept) - 1] if kept else after,
        "count": len(kept),
        "truncated": truncated,
    }

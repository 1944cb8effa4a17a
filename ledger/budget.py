"""Budgeted answers (contract §3, §4): what a tool answers is recorded and returned within a
budget of bytes, and an answer that was cut says so.

The budget is the tool's `max_result_bytes` (default `DEFAULT_MAX_RESULT_BYTES`), lowered per
call by the agent's `budget_bytes`; no tool may declare more than `HARD_CAP_BYTES`, so nothing
a tool answers takes more than that in an event or a read model. What is measured is the
answer as JSON: the outcome's `result`, and a partial's `skipped` list beside it.

An answer within its budget is kept whole, unchanged. One over it is cut to fit, never
silently: small values are kept whole before big ones are cut, lists keep their first items,
texts their beginning; the `BudgetNote` says how big the answer was, what was left out where,
and how to ask for less. The seed's cheaper answers are helpers for the tools themselves
(`ToolContext.fits`, `.list_or_count`, `.delta`): a count instead of a list, the changes
instead of the state.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import orjson
from pydantic import BaseModel, ConfigDict

DEFAULT_MAX_RESULT_BYTES = 64 * 1024
HARD_CAP_BYTES = 1024 * 1024
MIN_BUDGET_BYTES = 256
MAX_OMISSIONS = 20  # places listed in a note (every omission is counted all the same)


class Omission(BaseModel):
    """One place of the answer that was cut: `kept` of `total` items, keys or characters."""

    model_config = ConfigDict(frozen=True)

    path: str  # a JSON pointer into the answer: /result/... or /skipped
    unit: Literal["items", "keys", "chars"]
    kept: int
    total: int


class BudgetNote(BaseModel):
    """The envelope's `budget`: present only when the answer was cut to fit."""

    model_config = ConfigDict(frozen=True)

    budget_bytes: int  # what the answer was cut to fit
    answer_bytes: int  # the whole answer, as JSON
    kept_bytes: int
    omitted_bytes: int
    omitted_items: int  # list items and object keys left out whole
    omitted: list[Omission]  # where (at most MAX_OMISSIONS places)
    narrow: str  # how to ask for less


def json_size(value: Any) -> int:
    return len(orjson.dumps(value))


def effective_budget(max_result_bytes: int, asked: int | None) -> int:
    """The tool's budget, or the agent's when it asked for less."""
    return max_result_bytes if asked is None else min(asked, max_result_bytes)


@dataclass(frozen=True)
class Fitted:
    answer: dict[str, Any]
    note: BudgetNote | None  # None: the answer came whole


def fit(answer: dict[str, Any], budget_bytes: int, *, tool_max: int | None = None) -> Fitted:
    """`answer` whole when it fits, else cut to fit with a note. An answer that is not JSON is
    left to the ledger's own check (it refuses to record it)."""
    try:
        size = json_size(answer)
    except (TypeError, orjson.JSONEncodeError):
        return Fitted(answer, None)
    if size <= budget_bytes:
        return Fitted(answer, None)
    cut = _Cut()
    kept = cut.value(answer, budget_bytes, "")
    if not isinstance(kept, dict) or json_size(kept) > budget_bytes:
        kept = {}  # the cut keeps within its room; should it ever not, keep nothing
    kept_bytes = json_size(kept)
    note = BudgetNote(
        budget_bytes=budget_bytes,
        answer_bytes=size,
        kept_bytes=kept_bytes,
        omitted_bytes=size - kept_bytes,
        omitted_items=cut.items,
        omitted=cut.omitted[:MAX_OMISSIONS],
        narrow=_narrow(budget_bytes, size, cut.omitted, tool_max),
    )
    return Fitted(kept, note)


_NOTHING = object()


@dataclass
class _Cut:
    omitted: list[Omission] = field(default_factory=list)
    items: int = 0

    def value(self, value: Any, room: int, path: str) -> Any:
        """`value` within `room` bytes of JSON, or `_NOTHING` when not even a stub fits."""
        size = json_size(value)
        if size <= room:
            return value
        if isinstance(value, str):
            return self._text(value, room, path)
        if isinstance(value, list):
            return self._list(value, room, path)
        if isinstance(value, dict):
            return self._object(value, room, path)
        return _NOTHING  # a number, true, false or null either fits or is left out

    def _text(self, text: str, room: int, path: str) -> Any:
        if room < 2:
            return _NOTHING
        low, high = 0, min(len(text), room)  # a character takes at least one byte
        while low < high:  # the longest beginning that fits
            middle = (low + high + 1) // 2
            if json_size(text[:middle]) <= room:
                low = middle
            else:
                high = middle - 1
        self.omitted.append(Omission(path=path, unit="chars", kept=low, total=len(text)))
        return text[:low]

    def _list(self, items: list[Any], room: int, path: str) -> Any:
        room -= 2
        if room < 0:
            return _NOTHING
        kept: list[Any] = []
        used = 0
        for item in items:
            cost = json_size(item) + (1 if kept else 0)
            if used + cost > room:
                break
            kept.append(item)
            used += cost
        if not kept and items:  # not even the first item whole: its beginning
            first = self.value(items[0], room, f"{path}/0")
            if first is not _NOTHING:
                kept.append(first)
        self.items += len(items) - len(kept)
        self.omitted.append(Omission(path=path, unit="items", kept=len(kept), total=len(items)))
        return kept

    def _object(self, document: dict[str, Any], room: int, path: str) -> Any:
        room -= 2
        if room < 0:
            return _NOTHING
        costs = {key: (json_size(key) + 1, json_size(value)) for key, value in document.items()}
        chosen: dict[str, Any] = {}
        used = 0
        # The small first, whole: counts, cursors and flags survive a cut of the bulk.
        for key in sorted(document, key=lambda k: sum(costs[k])):
            cost = sum(costs[key]) + (1 if chosen else 0)
            if used + cost <= room:
                chosen[key] = document[key]
                used += cost
        for key in document:  # then the rest, in order, each cut to what is left
            if key in chosen:
                continue
            left = room - used - costs[key][0] - (1 if chosen else 0)
            if left < 2:  # not even an empty text, list or object
                continue
            sub = self.value(document[key], left, f"{path}/{_escape(key)}")
            if sub is not _NOTHING:
                chosen[key] = sub
                used += costs[key][0] + json_size(sub) + (1 if len(chosen) > 1 else 0)
        missing = len(document) - len(chosen)
        if missing:
            self.items += missing
            self.omitted.append(
                Omission(path=path or "/", unit="keys", kept=len(chosen), total=len(document))
            )
        return {key: chosen[key] for key in document if key in chosen}


def _escape(key: str) -> str:
    return key.replace("~", "~0").replace("/", "~1")


def _narrow(budget: int, size: int, omitted: Sequence[Omission], tool_max: int | None) -> str:
    places = "; ".join(f"{o.path} kept {o.kept:,} of {o.total:,} {o.unit}" for o in omitted[:3]) + (
        "; …" if len(omitted) > 3 else ""
    )
    raise_it = (
        f", or raise budget_bytes (up to {tool_max:,} for this tool)"
        if tool_max is not None and budget < tool_max
        else ""
    )
    return (
        f"The answer was budgeted: {size:,} bytes cut to fit {budget:,} ({places}). Use what "
        "came back, then narrow the request: fewer items (a filter, a smaller page), a count "
        f"instead of a list, or only the changes since your last call{raise_it}."
    )


# --- what tools use to answer within their budget ------------------------------------------


def fits(result: Mapping[str, Any], budget_bytes: int) -> bool:
    return json_size(dict(result)) <= budget_bytes


def list_or_count(
    name: str, items: Sequence[Any], budget_bytes: int, **beside: Any
) -> dict[str, Any]:
    """`{name: [...items], **beside}` when it fits the budget, else the count instead:
    `{name + "_count": n, **beside}`."""
    listed = {name: list(items), **beside}
    if json_size(listed) <= budget_bytes:
        return listed
    return {f"{name}_count": len(items), **beside}


def delta(before: Mapping[str, Any], after: Mapping[str, Any]) -> dict[str, Any]:
    """The changes from `before` to `after` as a JSON Merge Patch (RFC 7386): changed and new
    keys with their new values, removed keys as null, nested objects as their own patches.
    (A patch cannot tell a removed key from one set to null: state without nulls.)"""
    patch: dict[str, Any] = {}
    for key in before:
        if key not in after:
            patch[key] = None
    for key, new in after.items():
        old = before.get(key, _NOTHING)
        if isinstance(old, Mapping) and isinstance(new, Mapping):
            inner = delta(old, new)
            if inner:
                patch[key] = inner
        elif old is _NOTHING or old != new:
            patch[key] = new
    return patch

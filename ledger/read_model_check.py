"""Proof that the read models (jobs, brakes, tokens) are what the events say.

`audit verify` streams the events past a `Replay`, which folds them in memory with the read
models' own definitions (`ledger.read_models`), then compares the stored rows with the folded
ones, table by table and key by key: a row missing, a row extra, or any stored column (the
JSON view included, key by key) that differs is a problem naming the table, the key and the
field. The stored tables are never written. Memory grows with the read models (as for
`outcomes rebuild`), not with the events, which are paged.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from enum import Enum, StrEnum
from typing import Any

from pydantic import BaseModel

from ledger.clock import format_time, utc
from ledger.events import RecordedEvent
from ledger.read_models import READ_MODELS, ReadModel, model_for

# Fields whose values may carry a secret (an agent's argument values, anything derived from
# them or from a token): a difference names them, never shows them.
SECRET_FIELDS = frozenset({"args", "request_hash", "token_hash"})
WITHHELD = "(withheld)"
MAX_PROBLEMS = 1000  # kept in a report; the rest are only counted (a wiped table has many)

StoredRows = Callable[[ReadModel[Any]], Iterable[Mapping[str, Any]]]


class Mismatch(StrEnum):
    MISSING = "row_missing"  # the events make a row the table does not hold
    EXTRA = "row_extra"  # the table holds a row no event makes
    DIFFERS = "field_differs"  # a stored column (or a key of the view) is not the fold's
    UNFOLDABLE = "events_unfoldable"  # the key's events do not fold (a damaged stream)


@dataclass(frozen=True)
class ReadModelProblem:
    kind: Mismatch
    table: str
    key: str
    field: str | None = None
    stored: Any = None  # WITHHELD for a secret field
    expected: Any = None  # what the events make of it; WITHHELD for a secret field
    detail: str = ""

    @property
    def message(self) -> str:
        where = f"{self.table} {self.key}"
        if self.kind is Mismatch.MISSING:
            return f"{where}: row missing (the events make it)"
        if self.kind is Mismatch.EXTRA:
            return f"{where}: extra row (no event makes it)"
        if self.kind is Mismatch.UNFOLDABLE:
            return f"{where}: its events do not fold: {self.detail}"
        if self.stored == WITHHELD:
            return f"{where}: {self.field} differs (values withheld)"
        return f"{where}: {self.field} differs: stored {self.stored!r}, events {self.expected!r}"

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": self.kind.value,
            "table": self.table,
            "key": self.key,
            "field": self.field,
            "stored": self.stored,
            "expected": self.expected,
            "message": self.message,
        }


@dataclass
class ReadModelReport:
    events_replayed: int = 0
    rows_checked: dict[str, int] = field(default_factory=dict)
    problems: list[ReadModelProblem] = field(default_factory=list)
    problems_total: int = 0  # problems beyond MAX_PROBLEMS are counted, not kept

    @property
    def ok(self) -> bool:
        return self.problems_total == 0

    def add(self, problem: ReadModelProblem) -> None:
        self.problems_total += 1
        if len(self.problems) < MAX_PROBLEMS:
            self.problems.append(problem)

    def to_json(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "events_replayed": self.events_replayed,
            "rows_checked": self.rows_checked,
            "problems": [p.to_json() for p in self.problems],
            "problems_total": self.problems_total,
        }


class Replay:
    """Every read model folded in memory from the events streamed past it."""

    def __init__(self) -> None:
        self.report = ReadModelReport()
        self.views: dict[str, dict[str, BaseModel]] = {m.table: {} for m in READ_MODELS}
        self.broken: dict[str, set[str]] = {m.table: set() for m in READ_MODELS}

    def watch(self, events: Iterable[RecordedEvent]) -> Iterator[RecordedEvent]:
        """The same events, each folded as it passes (so one read serves the chain check too)."""
        for event in events:
            self.add(event)
            yield event

    def add(self, event: RecordedEvent) -> None:
        self.report.events_replayed += 1
        model = model_for(event.type)
        if model is None:
            return
        try:
            key = model.key(event)
        except (KeyError, TypeError, ValueError) as exc:
            self._unfoldable(model, event.stream_id, f"no key in {event.type}: {exc!r}")
            return
        if key in self.broken[model.table]:
            return
        views = self.views[model.table]
        try:
            views[key] = model.fold(views.get(key), event)
        except (KeyError, TypeError, ValueError) as exc:  # pydantic's errors are ValueErrors
            views.pop(key, None)
            self._unfoldable(model, key, f"{event.type} at position {event.position}: {exc}")

    def _unfoldable(self, model: ReadModel[Any], key: str, detail: str) -> None:
        self.broken[model.table].add(key)
        self.report.add(ReadModelProblem(Mismatch.UNFOLDABLE, model.table, key, detail=detail))

    def compare(self, stored: StoredRows) -> ReadModelReport:
        """Compare every model's stored rows (`stored(model)`, any order) with the fold."""
        for model in READ_MODELS:
            self._compare_table(model, stored(model))
        return self.report

    def _compare_table(self, model: ReadModel[Any], rows: Iterable[Mapping[str, Any]]) -> None:
        expected = self.views[model.table]
        broken = self.broken[model.table]
        checked = 0
        for row in rows:
            checked += 1
            key = str(row.get(model.key_column))
            if key in broken:
                continue  # already reported: its events say nothing reliable
            view = expected.pop(key, None)
            if view is None:
                self.report.add(ReadModelProblem(Mismatch.EXTRA, model.table, key))
                continue
            for problem in _row_differences(model, key, row, model.row(key, view)):
                self.report.add(problem)
        for key in sorted(expected):
            self.report.add(ReadModelProblem(Mismatch.MISSING, model.table, key))
        expected.clear()  # compared: free it before the next table
        self.report.rows_checked[model.table] = checked


def _row_differences(
    model: ReadModel[Any], key: str, stored: Mapping[str, Any], expected: Mapping[str, Any]
) -> Iterator[ReadModelProblem]:
    for column in sorted(set(stored) | set(expected)):
        have, want = _plain(stored.get(column)), _plain(expected.get(column))
        if column == "view" and isinstance(have, dict) and isinstance(want, dict):
            for part in sorted(set(have) | set(want)):
                if have.get(part) != want.get(part):
                    yield _differs(model, key, f"view.{part}", have.get(part), want.get(part))
        elif have != want:
            yield _differs(model, key, column, have, want)


def _differs(model: ReadModel[Any], key: str, name: str, have: Any, want: Any) -> ReadModelProblem:
    if name.rpartition(".")[2] in SECRET_FIELDS:
        have = want = WITHHELD
    return ReadModelProblem(Mismatch.DIFFERS, model.table, key, name, have, want)


def _plain(value: Any) -> Any:
    """One form for both sides: times in the ledger's text form, enums as their values."""
    if isinstance(value, datetime):
        return format_time(utc(value))
    if isinstance(value, Enum):
        return value.value
    return value

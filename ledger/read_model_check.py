"""Proof that the read models (jobs, brakes, tokens, webhooks) are what the events say.

`audit verify` streams the events past `StreamModels` in stream order (every stream's events
together, in version order), which folds each stream with the read models' own definitions
(`ledger.read_models`) and compares the rows it makes with the stored ones, a batch of keys at
a time: a row missing, or any stored column (the JSON view included, key by key) that differs,
is a problem naming the table, the key and the field. Rows no event makes the database finds
itself (`Reads.rows_without_events`), and they are named as extra. The stored tables are never
written. Memory holds one stream's views and one batch of rows, whatever the ledger's size.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
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

# The stored rows of these keys of a read model (any order; a key with no row is left out).
StoredByKey = Callable[[ReadModel[Any], list[str]], Sequence[Mapping[str, Any]]]


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


class StreamModels:
    """Every read model folded one stream at a time (the events come in stream order), the
    rows it makes compared with the stored ones by key, `batch` keys at a time."""

    def __init__(self, stored: StoredByKey, batch: int = 500) -> None:
        self.report = ReadModelReport()
        self._stored = stored
        self._batch = batch
        self._stream: str | None = None
        self._views: dict[tuple[str, str], BaseModel] = {}  # this stream's, by (table, key)
        self._broken: set[tuple[str, str]] = set()
        self._pending: dict[str, dict[str, BaseModel]] = {m.table: {} for m in READ_MODELS}
        self._waiting = 0

    def add(self, event: RecordedEvent) -> None:
        if event.stream_id != self._stream:
            self._close()
            self._stream = event.stream_id
        self.report.events_replayed += 1
        found = fold_event(self._views, self._broken, event)
        if found is not None:
            self.report.add(found)

    def finish(self) -> ReadModelReport:
        self._close()
        self._flush()
        return self.report

    def extra(self, table: str, key: str) -> None:
        """A stored row no event makes (found by the database)."""
        self.report.add(ReadModelProblem(Mismatch.EXTRA, table, key))

    def _close(self) -> None:
        for (table, key), view in self._views.items():
            if (table, key) not in self._broken:
                self._pending[table][key] = view
                self._waiting += 1
        self._views.clear()
        self._broken.clear()
        if self._waiting >= self._batch:
            self._flush()

    def _flush(self) -> None:
        for model in READ_MODELS:
            expected = self._pending[model.table]
            if not expected:
                continue
            rows = self._stored(model, sorted(expected))
            by_key = {str(row.get(model.key_column)): row for row in rows}
            for key, view in expected.items():
                row = by_key.get(key)
                if row is None:
                    self.report.add(ReadModelProblem(Mismatch.MISSING, model.table, key))
                    continue
                for problem in row_differences(model, key, row, model.row(key, view)):
                    self.report.add(problem)
            expected.clear()
        self._waiting = 0


def fold_event(
    views: dict[tuple[str, str], BaseModel], broken: set[tuple[str, str]], event: RecordedEvent
) -> ReadModelProblem | None:
    """Fold one event of a stream into that stream's `views` (by table and key); a key whose
    events do not fold goes to `broken`, and the problem saying why is returned. The same
    fold serves `audit verify` and `outcomes rebuild`."""
    model = model_for(event.type)
    if model is None:
        return None
    try:
        key = model.key(event)
    except (KeyError, TypeError, ValueError) as exc:
        broken.add((model.table, event.stream_id))
        detail = f"no key in {event.type}: {exc!r}"
        return ReadModelProblem(Mismatch.UNFOLDABLE, model.table, event.stream_id, detail=detail)
    if (model.table, key) in broken:
        return None
    if model.home_stream(key) != event.stream_id:
        # Every writer appends a key's events to its own stream; one elsewhere was put there.
        broken.add((model.table, key))
        detail = f"{event.type} at position {event.position} is in {event.stream_id}"
        return ReadModelProblem(Mismatch.UNFOLDABLE, model.table, key, detail=detail)
    try:
        views[model.table, key] = model.fold(views.get((model.table, key)), event)
    except (KeyError, TypeError, ValueError) as exc:  # pydantic's errors are ValueErrors
        views.pop((model.table, key), None)
        broken.add((model.table, key))
        detail = f"{event.type} at position {event.position}: {exc}"
        return ReadModelProblem(Mismatch.UNFOLDABLE, model.table, key, detail=detail)
    return None


def row_differences(
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

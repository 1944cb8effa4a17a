"""The audit's part of the contract over the in-memory state (`audit_contract.py`): the same
pages, rows and records as the SQL stores, read from `MemoryState` (everything is in memory
already; the shapes are what the use cases see)."""

from __future__ import annotations

import bisect
from collections.abc import Callable, Iterator, Sequence
from itertools import islice
from typing import Any

from ledger.events import RecordedEvent
from ledger.persistence.memory_state import MemoryState
from ledger.queries import LedgerLink, StreamEvent, StreamKey
from ledger.read_models import READ_MODELS, ReadModel
from ledger.verification_record import VerificationRecord

MODELS: dict[str, ReadModel[Any]] = {model.table: model for model in READ_MODELS}


def model_of(table: str) -> ReadModel[Any]:
    if table not in MODELS:
        raise ValueError(f"{table!r} is not a read model")
    return MODELS[table]


def made_by_events(state: MemoryState, model: ReadModel[Any], key: str) -> bool:
    stream = state.streams.get(model.home_stream(key), ())
    return any(model.handles(e.type) for e in stream)


def _link(event: RecordedEvent) -> LedgerLink:
    return LedgerLink(
        event.position, event.stream_id, event.stream_version, event.hash, event.ledger_hash
    )


class MemoryAuditReads:
    state: MemoryState

    def _by_stream(self, after: StreamKey | None) -> Iterator[RecordedEvent]:
        names = sorted(self.state.streams)
        start = 0 if after is None else bisect.bisect_left(names, after[0])
        for name in names[start:]:
            for event in self.state.streams[name]:
                if after is None or (event.stream_id, event.stream_version) > after:
                    yield event

    def ledger_links(self, after: int, limit: int) -> list[LedgerLink]:
        found = self.state.events
        start = bisect.bisect_right(found, after, key=lambda e: e.position)
        return [_link(e) for e in found[start : start + limit]]

    def events_by_stream(self, after: StreamKey | None, limit: int) -> list[StreamEvent]:
        return [StreamEvent(e, True) for e in islice(self._by_stream(after), limit)]

    def events_in_streams(self, stream_ids: Sequence[str]) -> list[StreamEvent]:
        return [
            StreamEvent(e, True)
            for name in sorted(set(stream_ids))
            for e in self.state.streams.get(name, ())
        ]

    def links_by_stream(self, after: StreamKey | None, limit: int) -> list[LedgerLink]:
        return [_link(e) for e in islice(self._by_stream(after), limit)]

    def streams_present(self, stream_ids: Sequence[str], upto: int | None) -> set[str]:
        streams = self.state.streams
        return {
            s
            for s in stream_ids
            if s in streams and (upto is None or streams[s][0].position <= upto)
        }

    def read_model_rows_by_key(self, table: str, keys: Sequence[str]) -> list[dict[str, Any]]:
        model = model_of(table)
        views = self.state.views(table)
        return [model.row(k, views[k]) for k in keys if k in views]

    def rows_without_events(self, table: str, after: str | None, limit: int) -> list[str]:
        model = model_of(table)
        keys = sorted(k for k in self.state.views(table) if after is None or k > after)
        return [k for k in keys if not made_by_events(self.state, model, k)][:limit]

    def count_rows(self, table: str) -> int:
        return len(self.state.views(table))

    def ledger_span(self, upto: int) -> tuple[int, str | None]:
        found = self.state.events
        end = bisect.bisect_right(found, upto, key=lambda e: e.position)
        return end, found[end - 1].ledger_hash if end else None

    def digest_heads(self, upto: int) -> Iterator[tuple[str, int, str]]:
        for name in sorted(self.state.streams):
            within = [e for e in self.state.streams[name] if e.position <= upto]
            if within:
                yield name, within[-1].stream_version, within[-1].hash

    def last_verification(self, samples: bool = True) -> VerificationRecord | None:
        found = [r for r in self.state.verifications if samples or r.covers_range]
        return found[-1] if found else None


class MemoryAuditWrites(MemoryAuditReads):
    undo: list[Callable[[], None]]

    def record_verification(self, record: VerificationRecord) -> None:
        found = self.state.verifications
        found.append(record)
        self.undo.append(lambda: found.remove(record))

"""The online rebuild's part of the contract over the in-memory state (`rebuild_contract.py`).
Transactions run one at a time under the store's lock, so a page's streams are locked already;
the rows written keep the state's indexes (idempotency keys, token hashes) as an append does."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from pydantic import BaseModel

from ledger.events import RecordedEvent
from ledger.job_view import JobView
from ledger.persistence.memory_audit import made_by_events, model_of
from ledger.persistence.memory_state import MemoryState
from ledger.rebuild_state import RebuildProgress
from ledger.token_view import TokenView


class MemoryRebuildReads:
    state: MemoryState

    def stream_ids(self, after: str | None, limit: int) -> list[str]:
        return sorted(s for s in self.state.streams if after is None or s > after)[:limit]

    def events_of_streams(self, stream_ids: Sequence[str]) -> list[RecordedEvent]:
        return [e for s in stream_ids for e in self.state.streams.get(s, ())]

    def rebuild_progress(self) -> RebuildProgress | None:
        return self.state.rebuild


class MemoryRebuildWrites(MemoryRebuildReads):
    undo: list[Callable[[], None]]
    _put: Callable[[dict[Any, Any], Any, Any], None]

    def lock_streams(self, stream_ids: Sequence[str]) -> None:
        return None  # transactions already run one at a time

    def write_read_model_rows(
        self,
        table: str,
        inserts: Sequence[dict[str, Any]],
        updates: Sequence[dict[str, Any]],
    ) -> None:
        model = model_of(table)
        for row in [*inserts, *updates]:
            key = row[model.key_column]
            self._set_view(table, key, model.view_type.model_validate(row["view"]))

    def delete_rows_without_events(self, table: str, keys: Sequence[str]) -> int:
        model = model_of(table)
        gone = [k for k in keys if k in self.state.views(table)]
        gone = [k for k in gone if not made_by_events(self.state, model, k)]
        for key in gone:
            self._set_view(table, key, None)
        return len(gone)

    def save_rebuild_progress(self, progress: RebuildProgress) -> None:
        before = self.state.rebuild
        self.state.rebuild = progress

        def restore() -> None:
            self.state.rebuild = before

        self.undo.append(restore)

    def _set_view(self, table: str, key: str, view: BaseModel | None) -> None:
        """Replace (or, with None, remove) a view, and the index entries the old one held."""
        views = self.state.views(table)
        old = views.get(key)
        # The kept counts follow the rows, as the SQL stores' triggers make them.
        if isinstance(view, JobView):
            self.undo.append(self.state.count_job(old if isinstance(old, JobView) else None, view))
        elif view is None and isinstance(old, JobView):
            self.undo.append(self.state.uncount_job(old))
        if isinstance(old, JobView) and old.idempotency_key is not None:
            self._drop(self.state.idempotency, (old.account, old.idempotency_key))
        if isinstance(old, TokenView):
            self._drop(self.state.token_hashes, old.token_hash)
        if view is None:
            self._drop(views, key)
            return
        self._put(views, key, view)
        if isinstance(view, JobView) and view.idempotency_key is not None:
            self._put(self.state.idempotency, (view.account, view.idempotency_key), key)
        if isinstance(view, TokenView):
            self._put(self.state.token_hashes, view.token_hash, key)

    def _drop(self, table: dict[Any, Any], key: Any) -> None:
        if key not in table:
            return
        before = table.pop(key)
        self.undo.append(lambda: table.__setitem__(key, before))

"""The store's contract, the online rebuild's part (`ledger.services.rebuild`): the streams a
page at a time in key order, their events, their locks, the read-model rows to write, and where
the rebuild stands. `Reads` and `Writes` (`ledger.persistence.base`) take these in; each store
implements them (`sql_rebuild.py`, `memory_rebuild.py`).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import Any

from ledger.events import RecordedEvent
from ledger.rebuild_state import RebuildProgress


class RebuildReads(ABC):
    @abstractmethod
    def stream_ids(self, after: str | None, limit: int) -> list[str]:
        """The ids of streams holding an event, above `after` (None: from the first), in the
        store's key order, at most `limit`."""

    @abstractmethod
    def events_of_streams(self, stream_ids: Sequence[str]) -> list[RecordedEvent]:
        """Every event of these streams (ids in the store's key order, as `stream_ids` gives
        them) as written, each stream in version order, streams in key order: what the
        append that wrote them folded."""

    @abstractmethod
    def rebuild_progress(self) -> RebuildProgress | None:
        """Where the rebuild stands (None: no rebuild ever began)."""


class RebuildWrites(ABC):
    @abstractmethod
    def lock_streams(self, stream_ids: Sequence[str]) -> None:
        """Hold these streams' locks to the end of the transaction, the ones an append takes
        (on Postgres in key order, as the append function takes its own: no wait in a
        circle). Every event committed to them before is then visible, and none lands until
        this transaction ends."""

    @abstractmethod
    def write_read_model_rows(
        self,
        table: str,
        inserts: Sequence[dict[str, Any]],
        updates: Sequence[dict[str, Any]],
    ) -> None:
        """Insert these rows, and replace the rows of these keys by these (whole rows, as
        `ReadModel.row` makes them)."""

    @abstractmethod
    def delete_rows_without_events(self, table: str, keys: Sequence[str]) -> int:
        """Delete the rows of these keys whose stream still holds no event of the model's
        types (asked again in the statement that deletes); how many went."""

    @abstractmethod
    def save_rebuild_progress(self, progress: RebuildProgress) -> None: ...

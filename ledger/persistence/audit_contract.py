"""The store's contract, the audit's part: what `audit verify` and `audit digest` read in
bounded memory (pages in ledger order and in stream order, read-model rows by key, the rows no
event makes, every stream's head as a stream), and the recorded verifications. `Reads` and
`Writes` (`ledger.persistence.base`) take these in; each store implements them
(`sql_audit.py`, `memory_audit.py`).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterator, Sequence
from typing import Any

from ledger.queries import LedgerLink, StreamEvent, StreamKey
from ledger.verification_record import VerificationRecord


class AuditReads(ABC):
    @abstractmethod
    def ledger_links(self, after: int, limit: int) -> list[LedgerLink]:
        """The events after ledger position `after`, in ledger order, at most `limit`: their
        place and hashes only."""

    @abstractmethod
    def events_by_stream(self, after: StreamKey | None, limit: int) -> list[StreamEvent]:
        """Every event this view can see, sequenced or not, in stream order (stream id, then
        version), after the cursor (None: from the first), at most `limit`. A sequenced event
        carries its ledger position (the lowest, should it hold two) and its write position;
        one not yet sequenced carries its write position as its position."""

    @abstractmethod
    def events_in_streams(self, stream_ids: Sequence[str]) -> list[StreamEvent]:
        """Every event of these streams, sequenced or not, in stream order (stream id, then
        version), as `events_by_stream` answers them: only these streams are read (by the
        unique index on stream and version), for `audit verify --since`."""

    @abstractmethod
    def links_by_stream(self, after: StreamKey | None, limit: int) -> list[LedgerLink]:
        """The sequenced events in stream order after the cursor, at most `limit`: their
        place and hashes only (a published digest's check)."""

    @abstractmethod
    def streams_present(self, stream_ids: Sequence[str], upto: int | None) -> set[str]:
        """Which of these streams hold a sequenced event (at or below ledger position `upto`,
        when given)."""

    @abstractmethod
    def read_model_rows_by_key(self, table: str, keys: Sequence[str]) -> list[dict[str, Any]]:
        """The stored rows of these keys of a read model, as `read_model_rows` gives them (a
        key with no row is left out)."""

    @abstractmethod
    def rows_without_events(self, table: str, after: str | None, limit: int) -> list[str]:
        """Keys of a read model's rows above `after`, in key order, at most `limit`, whose
        stream (`ReadModel.home_stream`) holds no event of the model's types: rows no event
        makes. The database finds them; only they come back."""

    @abstractmethod
    def count_rows(self, table: str) -> int:
        """How many rows a read model's table holds."""

    @abstractmethod
    def ledger_span(self, upto: int) -> tuple[int, str | None]:
        """How many events lie at or below ledger position `upto`, and the ledger-wide link
        of the last of them (None: none)."""

    @abstractmethod
    def digest_heads(self, upto: int) -> Iterator[tuple[str, int, str]]:
        """Every stream's head (stream id, version, hash) among the events at or below ledger
        position `upto`, ordered by stream id in code-point order (the digest's canonical
        order), streamed: nothing of it is held but the rows in flight."""

    @abstractmethod
    def last_verification(self, samples: bool = True) -> VerificationRecord | None:
        """The newest recorded verification (one index read), or None; with `samples` False,
        the newest that checked a whole range (`covers_range`)."""


class AuditWrites(ABC):
    @abstractmethod
    def record_verification(self, record: VerificationRecord) -> None:
        """Keep a finished verification's record."""

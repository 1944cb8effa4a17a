"""Where an online rebuild of the read models stands, and what it did.

`outcomes rebuild` walks the streams in key order a page at a time; each page's rows and this
progress commit together, so a rebuild stopped anywhere resumes after the last stream it
committed (`after_stream`). The run id says which process owns the progress: a second rebuild
started meanwhile takes it over, and the first stops at its next page.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

from ledger.clock import format_time

MAX_UNFOLDABLE = 100  # streams whose events do not fold, named in a report (the rest counted)


@dataclass(frozen=True)
class RebuildProgress:
    run_id: str
    started_at: datetime
    updated_at: datetime
    finished_at: datetime | None = None
    after_stream: str | None = None  # the last stream whose rows are committed (None: none)
    streams: int = 0
    events: int = 0
    inserted: int = 0
    updated: int = 0
    deleted: int = 0

    @classmethod
    def begin(cls, at: datetime) -> RebuildProgress:
        return cls(run_id=str(uuid.uuid4()), started_at=at, updated_at=at)

    def adopted(self, run_id: str, at: datetime) -> RebuildProgress:
        """The same progress, owned by another run (a resumption)."""
        return replace(self, run_id=run_id, updated_at=at)

    def advanced(self, page: PageDone, at: datetime) -> RebuildProgress:
        return replace(
            self,
            updated_at=at,
            after_stream=page.last_stream or self.after_stream,
            streams=self.streams + page.streams,
            events=self.events + page.events,
            inserted=self.inserted + page.inserted,
            updated=self.updated + page.updated,
            deleted=self.deleted + page.deleted,
        )


@dataclass(frozen=True)
class PageDone:
    """What one page of a rebuild changed."""

    last_stream: str | None = None
    streams: int = 0
    events: int = 0
    inserted: int = 0
    updated: int = 0
    deleted: int = 0


@dataclass
class RebuildReport:
    """A rebuild's summary (`outcomes rebuild --json`): what this run replayed and changed,
    and the totals of the rebuild it finished (a resumed one began in an earlier run)."""

    events_replayed: int = 0  # by this run
    streams: int = 0
    inserted: int = 0
    updated: int = 0
    deleted: int = 0
    resumed_after: str | None = None  # the stream a resumed rebuild went on after
    started_at: datetime | None = None  # when the rebuild this run finished began
    unfoldable: list[str] = field(default_factory=list)  # "table key: why", left unchanged
    unfoldable_total: int = 0

    @property
    def ok(self) -> bool:
        return self.unfoldable_total == 0

    def add_page(self, page: PageDone) -> None:
        self.events_replayed += page.events
        self.streams += page.streams
        self.inserted += page.inserted
        self.updated += page.updated
        self.deleted += page.deleted

    def add_unfoldable(self, line: str) -> None:
        self.unfoldable_total += 1
        if len(self.unfoldable) < MAX_UNFOLDABLE:
            self.unfoldable.append(line)

    def to_json(self) -> dict[str, Any]:
        return {
            "events_replayed": self.events_replayed,
            "streams": self.streams,
            "rows_inserted": self.inserted,
            "rows_updated": self.updated,
            "rows_deleted": self.deleted,
            "resumed_after": self.resumed_after,
            "started_at": format_time(self.started_at) if self.started_at else None,
            "unfoldable": self.unfoldable,
            "unfoldable_total": self.unfoldable_total,
        }

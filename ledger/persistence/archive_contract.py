"""The store's part in archives and partitions (docs/archive.md), declared once; `SqlArchives`
implements it for Postgres and SQLite. A store that keeps no archives (memory) inherits these
defaults: archiving is refused as not supported, and reads answer that nothing is archived.

The use case (`ledger.services.archive`) decides; the store answers questions about ranges of
write positions, streams their events and jobs, and records, finishes or abandons an archive.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from ledger.archive import (
    ArchiveBase,
    ArchivedJob,
    ArchiveRange,
    ArchiveRecord,
    CutFacts,
)
from ledger.errors import ArchiveUnsupportedError
from ledger.events import RecordedEvent


class ArchiveStore:
    """Archives and partitions: the defaults of a store that keeps neither."""

    dialect: str

    def _unsupported(self) -> ArchiveUnsupportedError:
        return ArchiveUnsupportedError(
            f"the {self.dialect} store keeps no archives (PostgreSQL and SQLite do)"
        )

    # --- partitions (Postgres) ------------------------------------------------------------

    def make_partitions(self, ahead: int) -> int:
        """Make partitions until `ahead` lie above the newest write position; how many were
        made (0: none needed, or a store without partitions)."""
        return 0

    def partitions_ahead(self) -> int | None:
        """How many partitions lie above the newest write position (None: not partitioned)."""
        return None

    # --- planning -------------------------------------------------------------------------

    def archive_ranges(self) -> list[tuple[int, int]]:
        """The ranges of write positions [lower, upper) still in the database whose every
        position has been handed out, oldest first (Postgres: its partitions; SQLite: the same
        grid, kept virtual)."""
        raise self._unsupported()

    def range_facts(self, lower: int, upper: int) -> ArchiveRange:
        raise self._unsupported()

    def cut_at(self, lower: int, upper: int) -> CutFacts:
        """Whether the events written in [lower, upper), with those below already archived,
        are a prefix of the ledger order: all sequenced, none written later placed before
        them."""
        raise self._unsupported()

    # --- reading what is archived ---------------------------------------------------------

    def archive_events(self, lower: int, upper: int) -> Iterator[RecordedEvent]:
        """Every event written in [lower, upper), in ledger order, page by page."""
        raise self._unsupported()

    def archive_jobs(self, lower: int, upper: int) -> Iterator[dict[str, Any]]:
        """The read-model rows of the jobs that have ended and whose last event was written in
        [lower, upper) (a job not ended below the cut is kept, not archived), by id, page by
        page (every stored column; `view` decoded)."""
        raise self._unsupported()

    # --- recording ------------------------------------------------------------------------

    def archive_records(self) -> list[ArchiveRecord]:
        """Every archive the database knows, oldest first."""
        return []

    def record_archive(self, record: ArchiveRecord) -> int:
        """Record the archive (state RECORDED) and list its jobs (`archived_jobs`: those whose
        last event was written in its range); how many jobs were listed."""
        raise self._unsupported()

    def finish_archive(self, record: ArchiveRecord) -> None:
        """In one transaction, once the database is still what the archive holds: the job
        streams' events of its range leave (the other streams' stay), its jobs' read-model
        rows go, and it is DONE. ArchiveRefusedError (nothing changed) when the ledger moved."""
        raise self._unsupported()

    def abandon_archive(self, archive_id: int) -> None:
        """Forget an archive recorded but not finished (its files were not what it says)."""
        raise self._unsupported()

    # --- what readers ask -----------------------------------------------------------------

    def archive_base(self) -> ArchiveBase | None:
        """Where the ledger in the database begins after its newest finished archive."""
        done = [r for r in self.archive_records() if r.state == "done"]
        return done[-1].base() if done else None

    def archived_job(self, job_id: str) -> ArchivedJob | None:
        """The archived job with this id (None: not archived, or never was)."""
        return None

"""Reading archives: their files verified with no database (`outcomes audit verify --archive`),
an archived job found in them (`outcomes jobs show ID --archive`), and what the database keeps
of its archives. Writing one: `ledger.services.archive`."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ledger import archive_files
from ledger.archive import ArchiveBase, ArchiveRecord
from ledger.archive_check import ArchiveCheck, Progress, verify_archives
from ledger.archive_check import total_events as counted
from ledger.errors import ArchiveError
from ledger.events import RecordedEvent
from ledger.runtime.ledger import Ledger


def verify_files(directory: Path, progress: Progress | None = None) -> list[ArchiveCheck]:
    """Every archive in `directory`, from its files alone (no database)."""
    return verify_archives(directory, progress)


def total_events(directory: Path) -> int:
    return counted(directory)


@dataclass(frozen=True)
class FoundJob:
    archive_id: int
    folder: Path
    row: dict[str, object]
    events: list[RecordedEvent]


def find_job(directory: Path, job_id: str) -> FoundJob:
    """An archived job's read-model row and events, from the files of `directory`."""
    for folder, manifest, _ in archive_files.archive_folders(directory):
        row = archive_files.find_job(folder, job_id)
        if row is not None:
            found = archive_files.stream_events(folder, manifest, f"job-{job_id}")
            return FoundJob(manifest.archive_id, folder, row, found)
    raise ArchiveError(f"no archive in {directory} holds job {job_id}")


def base(ledger: Ledger) -> ArchiveBase | None:
    return ledger.store.archive_base()


def records(ledger: Ledger) -> list[ArchiveRecord]:
    return ledger.store.archive_records()

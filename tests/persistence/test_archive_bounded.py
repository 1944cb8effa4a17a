"""An archive is written and read a page at a time, on SQLite and Postgres: with a page of a
few rows, every file holds several row groups of at most a page, every read of them asks for
batches of at most a page and gets no more, and neither the archive's read-back nor
`verify --archive` keeps more than a few of the events it reads alive at once (were either to
hold an archive's events, or a file's, as it once did, the count would be all of them)."""

from __future__ import annotations

import weakref
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from ledger import archive_files
from ledger.events import RecordedEvent
from ledger.persistence import sql_archive
from ledger.persistence.sql_store import SqlStore
from ledger.runtime.ledger import Ledger
from ledger.services import archive
from tests.factories import open_sql
from tests.plugins.archiving import ended_jobs, open_job, soon, token_events

PAGE = 3  # rows a page: a row group written, a batch read, a page of the database's rows
LIVE = 2 * PAGE  # events alive at once, at most (the merge's heads, the last one seen)


@pytest.fixture
def store(tiny_url: str) -> Iterator[SqlStore]:
    with open_sql(tiny_url) as opened:
        yield opened


class Reads:
    """What reading the files did: each batch's size asked and got, and the most events made
    from their rows that were alive at once (weak references: a spy that keeps nothing)."""

    def __init__(self) -> None:
        self.asked: list[int] = []
        self.got: list[int] = []
        self.made = 0
        self.most_alive = 0
        self._alive: list[weakref.ref[RecordedEvent]] = []

    def saw(self, event: RecordedEvent) -> None:
        self.made += 1
        self._alive = [ref for ref in self._alive if ref() is not None]
        self._alive.append(weakref.ref(event))
        self.most_alive = max(self.most_alive, len(self._alive))

    def reset(self) -> None:
        self.asked, self.got, self._alive = [], [], []
        self.made = self.most_alive = 0


@pytest.fixture
def reads(monkeypatch: pytest.MonkeyPatch) -> Reads:
    monkeypatch.setattr(archive_files, "BATCH", PAGE)
    monkeypatch.setattr(sql_archive, "PAGE_ROWS", PAGE)
    spy = Reads()
    iter_batches = pq.ParquetFile.iter_batches

    def batches(self: pq.ParquetFile, *args: Any, **kwargs: Any) -> Iterator[Any]:
        spy.asked.append(int(kwargs.get("batch_size", args[0] if args else 65536)))
        for batch in iter_batches(self, *args, **kwargs):
            spy.got.append(batch.num_rows)
            yield batch

    row_event = archive_files.row_event

    def made(row: Any) -> RecordedEvent:
        event = row_event(row)
        spy.saw(event)
        return event

    monkeypatch.setattr(pq.ParquetFile, "iter_batches", batches)
    monkeypatch.setattr(archive_files, "row_event", made)
    return spy


def test_an_archive_is_written_and_read_a_page_at_a_time(
    store: SqlStore, tmp_path: Path, reads: Reads
) -> None:
    token_events(store, 2)
    ended_jobs(store, 30)  # ~70 events: several ranges, each several pages
    open_job(store)
    done = archive.archive(Ledger(store), tmp_path, soon())
    manifest = done.manifest
    assert manifest.counts.events > 5 * LIVE and manifest.counts.jobs > PAGE
    # Written a page at a time: a file holds row groups of a page at most, several of them.
    for entry in manifest.files:
        metadata = pq.ParquetFile(done.folder / entry.name).metadata
        groups = [metadata.row_group(g).num_rows for g in range(metadata.num_row_groups)]
        assert sum(groups) == entry.rows and max(groups) <= PAGE, (entry.name, groups)
        if entry.rows > PAGE:
            assert len(groups) > 1, (entry.name, groups)
    # Read back (every row against the database, then verified) a batch at a time, never
    # holding the events: each file's rows were made into events at least twice.
    assert reads.asked and max(reads.asked) <= PAGE
    assert reads.got and max(reads.got) <= PAGE
    assert reads.made >= 2 * manifest.counts.events
    assert reads.most_alive <= LIVE, reads.most_alive
    # `verify --archive`: the same, from the files alone.
    reads.reset()
    checks = archive.verify_files(tmp_path)
    assert checks and all(c.ok for c in checks), [c.report.problems[:3] for c in checks]
    assert checks[0].report.events_checked == manifest.counts.events
    assert reads.asked and max(reads.asked) <= PAGE
    assert reads.got and max(reads.got) <= PAGE
    assert reads.made == manifest.counts.events
    assert reads.most_alive <= LIVE, reads.most_alive

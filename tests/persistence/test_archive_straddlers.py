"""Archives under steady load: jobs always in flight across every range boundary (a job's
decision in one range, its outcome in the next). The archive takes the ranges and keeps the
straddling jobs (their events below the cut copied into the files and kept in the database,
with checkpoints); a later archive whose cut passes all their events takes them. Both verifies
pass after each; a straddler's kept event changed is named."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
from sqlalchemy import text

from ledger.events import job_stream
from ledger.persistence.sql_store import SqlStore
from ledger.runtime.ledger import Ledger
from ledger.services import archive, audit
from tests.factories import accepted, open_sql, succeeded
from tests.plugins.archiving import TINY, soon, token_events


@pytest.fixture
def store(tiny_url: str) -> SqlStore:
    with open_sql(tiny_url) as opened:
        yield opened  # type: ignore[misc]


def in_flight(store: SqlStore, count: int, waiting: list[str]) -> list[str]:
    """`count` jobs accepted, each ended only after the next one is accepted (and after 3
    more for every fourth): some job is always open across every boundary. `waiting`: the
    jobs still open, oldest first (ended here as new ones come)."""
    for n in range(count):
        job_id = str(uuid.uuid4())
        store.append(job_stream(job_id), [accepted(account="acme")], 0)
        waiting.append(job_id)
        if len(waiting) > (4 if n % 4 == 0 else 1):
            store.append(job_stream(waiting.pop(0)), [succeeded()], 1)
        store.make_partitions(2)
    return waiting


def end_all(store: SqlStore, waiting: list[str]) -> None:
    while waiting:
        store.append(job_stream(waiting.pop(0)), [succeeded()], 1)
        store.make_partitions(2)


def both_verify(store: SqlStore, directory: Path) -> None:
    found = audit.verify_all(Ledger(store))
    assert found.ok, (found.chain.problems[:3], found.read_models.problems[:3])
    checks = archive.verify_files(directory)
    assert checks and all(c.ok for c in checks), [c.report.problems[:3] for c in checks]


def test_straddling_jobs_are_kept_then_archived_once_they_end(
    store: SqlStore, tmp_path: Path
) -> None:
    ledger = Ledger(store)
    token_events(store, 1)
    waiting = in_flight(store, 30, [])
    first = archive.archive(ledger, tmp_path, soon()).manifest
    assert first.write_to > 1 + 2 * TINY  # ranges taken though no boundary is free of jobs
    kept_jobs = {s for s in first.checkpoints if s.startswith("job-")}
    assert kept_jobs, "the jobs open across the cut are kept"
    with store.reading() as reads:
        for stream in kept_jobs:
            job_id = stream.removeprefix("job-")
            assert store.archived_job(job_id) is None and reads.job(job_id) is not None
            assert len(reads.read_stream(stream)) >= first.checkpoints[stream].version
    both_verify(store, tmp_path)

    end_all(store, waiting)
    in_flight(store, 20, waiting)  # more load: the next cut has straddlers of its own
    second = archive.archive(ledger, tmp_path, soon()).manifest
    assert second.streams_before == first.checkpoints
    for stream in kept_jobs:  # ended below the second cut: archived now, kept rows gone
        job_id = stream.removeprefix("job-")
        assert stream not in second.checkpoints
        found = store.archived_job(job_id)
        assert found is not None and found.archive_id == 2
        with store.reading() as reads:
            assert reads.read_stream(stream) == [] and reads.job(job_id) is None
        located = archive.find_job(tmp_path, job_id)
        assert located.archive_id == 2
    both_verify(store, tmp_path)
    base = store.archive_base()
    assert base is not None and base.kept_events == second.counts.kept_total


def test_a_straddlers_kept_event_changed_is_named(store: SqlStore, tmp_path: Path) -> None:
    waiting = in_flight(store, 30, [])
    done = archive.archive(Ledger(store), tmp_path, soon()).manifest
    stream = min(s for s in done.checkpoints if s.startswith("job-"))
    with store.engine.begin() as conn:
        where = {"s": stream}
        if store.dialect == "postgresql":
            conn.execute(text("ALTER TABLE events DISABLE TRIGGER events_no_update_delete"))
        else:
            conn.execute(text("DROP TRIGGER IF EXISTS events_no_update"))
        conn.execute(
            text("UPDATE events SET actor = 'mallory' WHERE stream_id = :s AND stream_version = 1"),
            where,
        )
        if store.dialect == "postgresql":
            conn.execute(text("ALTER TABLE events ENABLE TRIGGER events_no_update_delete"))
    found = audit.verify_all(Ledger(store))
    assert not found.ok
    assert any(p.stream_id == stream for p in found.chain.problems), found.chain.problems[:3]
    end_all(store, waiting)

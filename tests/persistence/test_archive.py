"""`outcomes archive` on SQLite and Postgres with tiny partitions: the old ledger leaves the
database, the database and the files each verify, tampering with either is named, a job not
ended is refused by name, a kill at each step loses nothing and the next run finishes."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from sqlalchemy import func, select, text

from ledger.chain import ProblemKind, event_rows
from ledger.clock import now
from ledger.errors import ArchiveRefusedError, ArchiveUnsupportedError
from ledger.events import TokenCreated, job_stream
from ledger.persistence.memory import MemoryStore
from ledger.persistence.schema import events, jobs
from ledger.persistence.sql_store import SqlStore
from ledger.runtime.ledger import Ledger
from ledger.services import archive, audit
from tests.factories import new, open_sql
from tests.plugins.archiving import TINY, ended_jobs, open_job, soon, token_events


@pytest.fixture
def store(tiny_url: str) -> SqlStore:
    with open_sql(tiny_url) as opened:
        yield opened  # type: ignore[misc]


EDIT = text("UPDATE events SET actor = 'mallory' WHERE position = :p")


def count(store: SqlStore, table: object) -> int:
    with store.connection() as conn:
        return int(conn.execute(select(func.count()).select_from(table)).scalar_one())


def both_verify(store: SqlStore, directory: Path) -> None:
    found = audit.verify_all(Ledger(store))
    assert found.ok, (found.chain.problems[:3], found.read_models.problems[:3])
    checks = archive.verify_files(directory)
    assert checks and all(c.ok for c in checks), [c.report.problems[:3] for c in checks]


def test_an_archive_leaves_both_the_database_and_its_files_verifiable(
    store: SqlStore, tmp_path: Path
) -> None:
    ledger = Ledger(store)
    token_events(store, 3)  # 4 events: kept streams, whose events stay in the database
    first = ended_jobs(store, 20)  # 40 events
    open_job(store)
    before_events = count(store, events)
    done = archive.archive(ledger, tmp_path, soon())
    manifest = done.manifest
    assert manifest.write_from == 1 and manifest.write_to % TINY == 1
    assert manifest.counts.kept_events == 4 and manifest.counts.jobs > 0
    assert manifest.counts.jobs_by_status == {"succeeded": manifest.counts.jobs}
    assert count(store, events) == before_events - manifest.counts.job_events
    archived = [j for j in first if store.archived_job(j) is not None]
    assert len(archived) == manifest.counts.jobs
    with store.reading() as reads:
        assert all(reads.job(j) is None for j in archived)
        assert reads.read_stream(job_stream(archived[0])) == []
        token = reads.token("t0")  # authentication reads the kept streams' events
        assert token is not None and token.revoked
    both_verify(store, tmp_path)
    # More ended jobs, and a second archive chained to the first.
    ended_jobs(store, 15)
    archive.archive(ledger, tmp_path, soon())  # the open job is kept, not in the way
    assert [r.state for r in store.archive_records()] == ["done", "done"]
    both_verify(store, tmp_path)


def test_a_second_archive_chains_to_the_first(store: SqlStore, tmp_path: Path) -> None:
    ledger = Ledger(store)
    token_events(store, 1)
    ended_jobs(store, 16)
    archive.archive(ledger, tmp_path, soon())
    ended_jobs(store, 20)
    second = archive.archive(ledger, tmp_path, soon())
    first = store.archive_records()[0]
    assert second.manifest.previous is not None
    assert second.manifest.previous.manifest_sha256 == first.manifest_sha256
    assert second.manifest.ledger_hash_before == first.parsed().ledger_hash_last
    both_verify(store, tmp_path)
    base = store.archive_base()
    # The token's 2 events, and those of a job straddling the cut (kept until it is archived).
    assert base is not None and base.archive_id == 2 and base.kept_events >= 2


@pytest.mark.parametrize(
    ("tokens", "jobs_before"),
    [(2, 16), (0, 13)],  # 40 and 30 events: the first archive ends at the ledger's last event
    ids=["kept-rows-before-the-cut", "no-row-left"],
)
def test_events_written_after_an_archive_of_the_ledgers_tail_link_to_its_last_event(
    store: SqlStore, tmp_path: Path, tokens: int, jobs_before: int
) -> None:
    """The archive removes every row from some kept one (or from the first) to the ledger's
    last event: the next event's ledger-wide link goes on from the archive's last link, not
    from the last row left (SQLite read that), so a second archive and both verifies pass."""
    ledger = Ledger(store)
    if tokens:
        token_events(store, tokens)
    ended_jobs(store, jobs_before)
    first = archive.archive(ledger, tmp_path, soon()).manifest
    with store.connection() as conn:
        top = conn.execute(select(func.max(events.c.position))).scalar()
    assert first.ledger_last is not None and (top is None or top < first.ledger_last)
    both_verify(store, tmp_path)
    ended_jobs(store, 16)
    second = archive.archive(ledger, tmp_path, soon()).manifest
    assert second.ledger_hash_before == first.ledger_hash_last
    assert [r.state for r in store.archive_records()] == ["done", "done"]
    both_verify(store, tmp_path)


def test_a_job_not_ended_is_kept_not_in_the_way(store: SqlStore, tmp_path: Path) -> None:
    stuck = open_job(store)
    ended_jobs(store, 10)
    done = archive.archive(Ledger(store), tmp_path, soon())
    assert f"job-{stuck}" in done.manifest.checkpoints and store.archived_job(stuck) is None
    with store.reading() as reads:
        assert reads.job(stuck) is not None
        assert len(reads.read_stream(job_stream(stuck))) == 1
    both_verify(store, tmp_path)


def test_nothing_newer_than_the_cutoff_goes(store: SqlStore, tmp_path: Path) -> None:
    ended_jobs(store, 10)
    with pytest.raises(ArchiveRefusedError, match="recorded at or after"):
        archive.archive(Ledger(store), tmp_path, now().replace(year=2000))


def test_a_byte_changed_in_a_file_and_a_row_changed_in_the_database_are_each_named(
    store: SqlStore, tmp_path: Path
) -> None:
    ended_jobs(store, 16)
    done = archive.archive(Ledger(store), tmp_path, soon())
    events_file = done.folder / done.manifest.files[0].name
    raw = bytearray(events_file.read_bytes())
    raw[len(raw) // 2] ^= 0x01
    events_file.write_bytes(bytes(raw))
    (check,) = archive.verify_files(tmp_path)
    assert not check.ok
    named = [p for p in check.report.problems if p.kind is ProblemKind.ARCHIVE_FILE]
    assert named and events_file.name in named[0].message
    # A live row, edited by someone who may go around the triggers (the owner).
    with store.engine.begin() as conn:
        target = conn.execute(select(func.max(events.c.position))).scalar_one()
        if store.dialect == "postgresql":
            conn.execute(text("ALTER TABLE events DISABLE TRIGGER events_no_update_delete"))
            conn.execute(
                text("UPDATE events SET actor = 'mallory' WHERE position = :p"), {"p": target}
            )
            conn.execute(text("ALTER TABLE events ENABLE TRIGGER events_no_update_delete"))
        else:
            conn.execute(text("DROP TRIGGER events_no_update"))
            conn.execute(
                text("UPDATE events SET actor = 'mallory' WHERE position = :p"), {"p": target}
            )
    found = audit.verify_all(Ledger(store))
    assert [p.kind for p in found.chain.problems] == [ProblemKind.HASH_MISMATCH]
    assert found.chain.problems[0].stream_id.startswith("job-")


def test_an_auditor_reads_the_files_with_pandas_alone(store: SqlStore, tmp_path: Path) -> None:
    """No code of ours: the event columns, and the ledger-wide chain recomputed with hashlib."""
    import hashlib
    import json

    import pandas as pd

    token_events(store, 1)
    ended_jobs(store, 16)
    done = archive.archive(Ledger(store), tmp_path, soon())
    manifest = json.loads((done.folder / "manifest.json").read_text())
    frames = [
        pd.read_parquet(done.folder / f["name"]) for f in manifest["files"] if f["kind"] == "events"
    ]
    table = pd.concat(frames).sort_values("ledger_position")
    assert len(table) == manifest["counts"]["events"]
    link = manifest["ledger_hash_before"] or ""
    for event_hash, stored in zip(table["hash"], table["ledger_hash"], strict=True):
        link = hashlib.sha256(f"{link}:{event_hash}".encode()).hexdigest()
        assert link == stored
    assert link == manifest["ledger_hash_last"]
    jobs_file = pd.read_parquet(done.folder / "jobs.parquet")
    assert set(jobs_file["status"]) == {"succeeded"}


@pytest.mark.parametrize("step", ["files", "recorded"])
def test_a_kill_at_each_step_loses_nothing_and_the_next_run_finishes(
    store: SqlStore, tiny_url: str, tmp_path: Path, step: str
) -> None:
    token_events(store, 1)
    ended_jobs(store, 16)
    before = count(store, events)
    directory = tmp_path / "archives"
    cutoff = soon().isoformat()
    env = os.environ | {"OUTCOMES_DATABASE_URL": tiny_url, archive.FAULT_VARIABLE: step}
    command = [sys.executable, "-m", "cli", "archive", "--before", cutoff, "--to", str(directory)]
    killed = subprocess.run(command, env=env, capture_output=True, timeout=120)
    assert killed.returncode == -9, killed.stderr.decode()
    assert count(store, events) == before  # no row left before the files were read back
    assert list(directory.glob("*/manifest.json"))
    states = [r.state for r in store.archive_records()]
    assert states == ([] if step == "files" else ["recorded"])
    del env[archive.FAULT_VARIABLE]
    again = subprocess.run([*command, "--json"], env=env, capture_output=True, timeout=120)
    assert again.returncode == 0, again.stderr.decode()
    assert [r.state for r in store.archive_records()] == ["done"]
    assert count(store, events) < before
    both_verify(store, directory)


def test_the_memory_store_says_it_keeps_no_archives(tmp_path: Path) -> None:
    with pytest.raises(ArchiveUnsupportedError, match="keeps no archives"):
        archive.archive(Ledger(MemoryStore()), tmp_path, soon())
    assert MemoryStore().archived_job("x") is None


def test_read_models_of_archived_jobs_leave_with_them(store: SqlStore, tmp_path: Path) -> None:
    ended_jobs(store, 16)
    rows = count(store, jobs)
    done = archive.archive(Ledger(store), tmp_path, soon())
    assert count(store, jobs) == rows - done.manifest.counts.jobs


TOKEN_INSERT = (
    "INSERT INTO events (stream_id, stream_version, event_id, type, data, code, actor,"
    " recorded_at, prev_hash, hash) VALUES (%(stream_id)s, %(stream_version)s, %(event_id)s,"
    " %(type)s, %(data)s, %(code)s, %(actor)s, %(recorded_at)s, %(prev_hash)s, %(hash)s)"
)


def token_row(token_id: str) -> dict[str, object]:
    """A token's first event as a writer would insert it (valid hashes)."""
    import psycopg.types.json

    created = TokenCreated(
        token_id=token_id, account="acme", role="agent", token_hash="ab" * 32, tools=None
    )
    (row,) = event_rows(f"token-{token_id}", [new(created)], 0, None, now())
    return {**row, "data": psycopg.types.json.Jsonb(row["data"])}


@pytest.mark.postgres
@pytest.mark.parametrize("tiny_url", ["postgres"], indirect=True)
def test_a_boundary_crossed_by_commit_order_is_no_clean_cut(store: SqlStore) -> None:
    """Write position 10 commits after 11 and 12, which are placed before it: the ledger order
    is not cut clean at 11, and the archive's run goes on to a later boundary that is."""
    import psycopg

    ended_jobs(store, 3)  # write positions 1..7
    token_events(store, 1)  # 8, 9
    dsn = store.engine.url.set(drivername="postgresql").render_as_string(hide_password=False)
    with psycopg.connect(dsn) as late, psycopg.connect(dsn, autocommit=True) as early:
        late.execute(TOKEN_INSERT, token_row("late"))  # write position 10, held open
        for name in ("early-1", "early-2"):  # 11, 12: committed, and placed, first
            early.execute(TOKEN_INSERT, token_row(name))
        store.sequence()
        late.commit()
    store.sequence()
    cut = store.cut_at(1, 11)
    assert not cut.clean and "written at 11" in (cut.reason or "")
    ended_jobs(store, 10)  # write positions 13..35: 31 is a clean cut between two jobs
    chosen = archive.plan(Ledger(store), soon())
    assert [(r.lower, r.upper) for r in chosen.ranges] == [(1, 11), (11, 21), (21, 31)]

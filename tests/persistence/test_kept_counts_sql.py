"""The kept counts' SQL side: migration 0017 counts an existing ledger, runs the counting
functions whole from its own copy, the code names that revision as the one it needs (`/readyz`
holds a ledger behind it not ready), the sequencer's leader folds the deltas, and a change of
status is one delta row (0028), read and folded as its two sides."""

from __future__ import annotations

import re
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest
from sqlalchemy import Engine, func, select, text

from ledger.clock import now
from ledger.codes import Code, OutcomeMissingCause
from ledger.error_info import ErrorInfo
from ledger.errors import SchemaMissingError
from ledger.events import JobOutcomeMissing
from ledger.persistence import migrate
from ledger.persistence.appends import NO_STREAM
from ledger.persistence.engine import make_engine
from ledger.persistence.migrate import SCRIPT_LOCATION
from ledger.persistence.schema import SCHEMA_REVISION, job_count_deltas
from ledger.persistence.sql_store import SqlStore
from ledger.runtime.ledger import Ledger
from ledger.runtime.sequencer import SequencerLoop
from tests.concurrent_writers import wait_until
from tests.databases import create_database, drop_database, pg_url, require_postgres, unique_name
from tests.factories import accepted, failed, fresh_job_stream, new, rebuild, started, succeeded
from tests.kept_counts import assert_kept_counts_exact, full_job_counts, full_summary
from tests.store_helpers import head_revision

CURRENT = SCRIPT_LOCATION / "functions" / "outcomes_counts.sql"


def test_the_newest_migration_runs_the_current_counting_functions_whole() -> None:
    snapshots = sorted((SCRIPT_LOCATION / "versions").glob("*_outcomes_counts.sql"))
    assert snapshots and snapshots[-1].read_text() == CURRENT.read_text()


def test_the_code_needs_the_newest_revision_and_revisions_sort_by_their_ids() -> None:
    """/readyz compares revision ids as text: they must be numbered in order, four digits."""
    assert head_revision() == SCHEMA_REVISION
    ids = [
        re.search(r'^revision = "(\d+)"', p.read_text(), re.M)
        for p in (SCRIPT_LOCATION / "versions").glob("*.py")
    ]
    assert all(found is not None and len(found.group(1)) == 4 for found in ids)


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def empty_engine(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Engine]:
    if request.param == "sqlite":
        engine = make_engine(f"sqlite:///{tmp_path / 'old.db'}")
        yield engine
        engine.dispose()
        return
    require_postgres()
    name = unique_name("outcomes_counts")
    create_database(name)
    engine = make_engine(pg_url(name))
    try:
        yield engine
    finally:
        engine.dispose()
        drop_database(name)


def test_the_migration_counts_a_ledger_recorded_before_it(empty_engine: Engine) -> None:
    migrate.upgrade(empty_engine, "0016")
    store = SqlStore(empty_engine)
    lost = ErrorInfo(code=Code.OUTCOME_MISSING, message="silence", cause="never_started")
    missing = JobOutcomeMissing(attempt=0, cause=OutcomeMissingCause.NEVER_STARTED, error=lost)
    for events in [
        [accepted()],
        [accepted("globex", "a.y"), started(), succeeded()],
        [accepted(), started(), failed()],
        [accepted(), new(missing, "reconciler")],
    ]:
        store.append(fresh_job_stream(), events, NO_STREAM)
    with pytest.raises(SchemaMissingError, match="revision 0016"):
        store.check_ready()  # this code needs 0017: not ready until migrated
    migrate.upgrade(empty_engine)
    store.check_ready()
    assert_kept_counts_exact(store)
    assert full_summary(store).jobs == 4
    with store.reading() as reads:
        assert [(f.type, f.cause, f.events) for f in reads.count_findings()] == [
            ("job.outcome_missing", "never_started", 1)
        ]
    # Counted from here on by the triggers.
    store.append(fresh_job_stream(), [accepted("initech")], NO_STREAM)
    assert_kept_counts_exact(store)


def _pending(store: SqlStore) -> int:
    with store.connection() as conn:
        return int(conn.execute(select(func.count()).select_from(job_count_deltas)).scalar_one())


@pytest.mark.postgres
def test_the_sequencers_leader_folds_the_deltas(pg_database: str) -> None:
    store = SqlStore(make_engine(pg_database))
    loop = SequencerLoop(Ledger(store))
    try:
        store.append(fresh_job_stream(), [accepted()], NO_STREAM)
        assert _pending(store) == 1  # the trigger's delta, in the writer's transaction
        loop.start()
        wait_until(lambda: _pending(store) == 0, 30, "the leader to fold the deltas")
        assert_kept_counts_exact(store)
    finally:
        loop.stop()
        store.close()


@pytest.mark.postgres
def test_the_application_role_folds_and_rebuilds(pg_app_url: str) -> None:
    """What the API, workers and reconciler connect as may fold the deltas and rebuild; the
    online rebuild's rows are counted by the same triggers as any write's."""
    store = SqlStore(make_engine(pg_app_url))
    try:
        store.append(fresh_job_stream(), [accepted(), started(), succeeded()], NO_STREAM)
        assert store.compact_counts() > 0
        store.append(fresh_job_stream(), [accepted("globex")], NO_STREAM)
        rebuild(store)
        assert_kept_counts_exact(store)
        store.compact_counts()
        assert _pending(store) == 0
        assert_kept_counts_exact(store)
    finally:
        store.close()


def _job_moving(store: SqlStore) -> None:
    """A job accepted, claimed and failed, and one accepted and claimed: three changes of
    status, each its own transaction (as a claim and an outcome are)."""
    for steps in ([[accepted()], [started()], [failed()]], [[accepted()], [started()]]):
        stream = fresh_job_stream()
        for version, events in enumerate(steps):
            store.append(stream, events, version if version else NO_STREAM)


@pytest.mark.postgres
def test_a_change_of_status_is_one_delta_row_read_as_both_sides(pg_database: str) -> None:
    store = SqlStore(make_engine(pg_database))
    try:
        _job_moving(store)
        assert _pending(store) == 2 + 3  # two inserts, three changes of status: a row each
        assert_kept_counts_exact(store)  # the readers take each change as -1 and +1
        since, until = now() - timedelta(hours=3), now() + timedelta(hours=2)
        with store.reading() as reads:  # by whole hours: the pending rows' hour among them
            kept = reads.summarize_jobs(None, since=since, until=until)
            assert reads.count_statuses(None, since=since, until=until) == kept.by_status
        assert kept == full_summary(store, since=since, until=until)
        assert store.compact_counts() == 5
        assert _pending(store) == 0
        assert_kept_counts_exact(store)
    finally:
        store.close()


@pytest.mark.postgres
def test_a_downgrade_keeps_the_pending_changes_counted() -> None:
    require_postgres()
    name = unique_name("outcomes_counts_down")
    create_database(name)
    engine = make_engine(pg_url(name))
    try:
        migrate.upgrade(engine)
        store = SqlStore(engine)
        _job_moving(store)
        expected = full_job_counts(store)
        migrate.downgrade(engine, "0027")  # the old functions read no `from_status`
        with engine.begin() as conn:
            assert int(conn.execute(text("SELECT outcomes_compact_counts()")).scalar_one()) == 8
            rows = conn.execute(text("SELECT accepted, status, code, tool, jobs FROM job_counts"))
            kept = sorted((bool(a), s, c or None, t, int(n)) for a, s, c, t, n in rows if n)
        assert kept == sorted((c.accepted, c.status, c.code, c.tool, c.jobs) for c in expected)
    finally:
        engine.dispose()
        drop_database(name)

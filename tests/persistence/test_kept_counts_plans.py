"""What a probe, a scrape, a summary and a status read of the big tables: almost nothing.

Each use case runs against a ledger of many closed jobs while every SQL statement it sends is
captured; each captured read is then run again under EXPLAIN. On Postgres (EXPLAIN ANALYZE, the
statistics fresh) the rows its plan actually read from `jobs`, `events` and `ledger_order` are
summed: a count over every job, or max(position) over `ledger_events`, reads them all. On
SQLite, EXPLAIN QUERY PLAN must show no full SCAN of `jobs` or `events`. No timing anywhere.
(The sequencer's own functions are opaque to EXPLAIN; 0015 keeps them on their indexes.)
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import event, text

from ledger.persistence.schema import metadata
from ledger.persistence.sql_store import SqlStore
from ledger.runtime.backlog import BacklogGauge
from ledger.runtime.ledger import Ledger
from ledger.services import admin, audit, counts, status
from tests.factories import open_sql

JOBS = 20_000
FIRST = datetime(2031, 1, 1, tzinfo=UTC)
SPACING_S = 10  # one job created every 10 s: 360 an hour
BIG_TABLES = {"jobs", "events", "ledger_order"}
# A scan of a partial index reads the few rows it holds (brake pulls, re-dispatches, open jobs).
PARTIAL = {
    str(index.name)
    for table in metadata.tables.values()
    for index in table.indexes
    if index.dialect_options["sqlite"]["where"] is not None
}
Captured = list[tuple[str, Any]]

_EVENTS = f"""
INSERT INTO events (stream_id, stream_version, event_id, type, data, code, actor, recorded_at,
                    prev_hash, hash)
SELECT 'job-' || lpad(g::text, 36, '0'), 1, gen_random_uuid(), 'job.accepted', '{{}}'::jsonb,
       NULL, 'filler', '{FIRST.isoformat()}'::timestamptz + g * interval '{SPACING_S} seconds',
       NULL, md5(g::text) || md5(g::text)
  FROM generate_series(1, {JOBS}) g
"""
_JOBS = f"""
INSERT INTO jobs (job_id, account, tool, status, terminal, accepted, spends, attempts, code,
                  idempotency_key, ledger_position, created_at, updated_at, view)
SELECT lpad(g::text, 36, '0'), 'acct-' || (g % 5), 'tool.' || (g % 7),
       CASE WHEN g % 3 = 0 THEN 'failed' ELSE 'succeeded' END, true, true, false, 1,
       CASE WHEN g % 3 = 0 THEN 'ACCESS_DENIED' END, NULL, g,
       '{FIRST.isoformat()}'::timestamptz + g * interval '{SPACING_S} seconds',
       '{FIRST.isoformat()}'::timestamptz + g * interval '{SPACING_S} seconds', '{{}}'::jsonb
  FROM generate_series(1, {JOBS}) g
"""


def _fill_sqlite(store: SqlStore) -> None:
    """SQLite needs no volume to show a plan: a few rows, and the statistics it keeps."""
    with store.transaction() as tx:
        for g in range(1, 200):
            at = (FIRST + timedelta(seconds=g * SPACING_S)).strftime("%Y-%m-%d %H:%M:%S.%f")
            tx.conn.execute(
                text(
                    "INSERT INTO jobs (job_id, account, tool, status, terminal, accepted, spends,"
                    " attempts, ledger_position, created_at, updated_at, view)"
                    " VALUES (:id, 'acct', 'tool.x', 'succeeded', 1, 1, 0, 1, :g, :at, :at, '{}')"
                ),
                {"id": f"{g:036d}", "g": g, "at": at},
            )
        tx.conn.execute(text("ANALYZE"))


@pytest.fixture
def big(store: SqlStore) -> Iterator[SqlStore]:
    if store.dialect == "postgresql":
        with store.transaction() as tx:
            tx.conn.execute(text(_EVENTS))
            tx.conn.execute(text(_JOBS))
        store.sequence()
        store.compact_counts()
        with store.engine.connect() as conn:
            conn.execution_options(isolation_level="AUTOCOMMIT").execute(text("VACUUM ANALYZE"))
    else:
        _fill_sqlite(store)
    yield store


@contextmanager
def captured(store: SqlStore) -> Iterator[Captured]:
    found: Captured = []

    def capture(*args: Any) -> None:
        _conn, _cursor, statement, parameters, _context, _many = args
        if statement.lstrip().upper().startswith(("SELECT", "WITH")):
            found.append((statement, parameters))

    event.listen(store.engine, "before_cursor_execute", capture)
    try:
        yield found
    finally:
        event.remove(store.engine, "before_cursor_execute", capture)


def _rows_read(plan: dict[str, Any]) -> int:
    """Rows the plan's scans of the big tables actually read, over all their loops: those they
    returned and those their filters removed (a scan that keeps none still read them all)."""
    here = 0
    if plan.get("Relation Name") in BIG_TABLES:
        read = sum(
            int(plan.get(key, 0))
            for key in ("Actual Rows", "Rows Removed by Filter", "Rows Removed by Index Recheck")
        )
        here = read * int(plan.get("Actual Loops", 1))
    return here + sum(_rows_read(child) for child in plan.get("Plans", []))


def read_from_big_tables(store: SqlStore, statements: Captured) -> int:
    total = 0
    raw = store.engine.raw_connection()
    try:
        cursor = raw.cursor()
        for statement, parameters in statements:
            if store.dialect == "postgresql":
                cursor.execute("EXPLAIN (ANALYZE, FORMAT JSON) " + statement, parameters)
                total += _rows_read(cursor.fetchone()[0][0]["Plan"])
            else:
                cursor.execute("EXPLAIN QUERY PLAN " + statement, parameters)
                details = [str(row[-1]) for row in cursor.fetchall()]
                scans = [d for d in details if d.startswith("SCAN") and _whole(d)]
                assert scans == [], (statement, details)
    finally:
        raw.close()
    return total


def _whole(detail: str) -> bool:
    """A SQLite SCAN of a big table, but not of one of its partial indexes."""
    words = detail.replace("(", " ").split()
    return len(words) > 1 and words[1] in BIG_TABLES and not PARTIAL & set(words)


def _metrics(ledger: Ledger) -> object:
    return counts.read(ledger)


def _backlog(ledger: Ledger) -> object:
    gauge = BacklogGauge(ledger, sample_s=0)
    gauge.sample_if_due()
    return gauge.sample_if_due()  # the second sample counts the starts since the first


USE_CASES: dict[str, Callable[[Ledger], object]] = {
    "readyz": admin.ready,
    "readyz again": admin.ready,  # the schema once seen, a trivial statement alone
    "metrics": _metrics,
    "status": status.ledger_status,
    "summary": lambda ledger: audit.summary(ledger, None),
    "summary of an account and tool": lambda ledger: audit.summary(ledger, "acct-1", "tool.3"),
    "console counts": lambda ledger: audit.status_counts(ledger, "acct-2", None),
    "backlog": _backlog,
}
# An edge hour holds 360 jobs: a range with partial hours at both ends reads at most those.
RANGE = (FIRST + timedelta(hours=5, minutes=20), FIRST + timedelta(hours=30, minutes=10))
EDGE_JOBS = 2 * 3600 // SPACING_S


@pytest.mark.parametrize("use_case", list(USE_CASES))
def test_probes_scrapes_and_summaries_read_no_big_table_whole(big: SqlStore, use_case: str) -> None:
    ledger = Ledger(big)
    if use_case == "readyz again":
        admin.ready(ledger)
    with captured(big) as statements:
        USE_CASES[use_case](ledger)
    assert statements, "nothing was asked"
    assert read_from_big_tables(big, statements) <= 5


def test_a_range_reads_the_partial_hours_at_its_ends_alone(big: SqlStore) -> None:
    ledger = Ledger(big)
    since, until = RANGE
    with captured(big) as statements:
        found = audit.summary(ledger, None, None, since, until)
        by_status = audit.status_counts(ledger, "acct-1", None, since, until)
    expected = int((until - since).total_seconds()) // SPACING_S
    if big.dialect == "postgresql":
        assert found.jobs == expected and sum(by_status.values()) > 0
    assert read_from_big_tables(big, statements) <= 2 * EDGE_JOBS


def test_a_probe_asks_nothing_of_the_ledger(big: SqlStore) -> None:
    """`/readyz`: the schema's revision until it is seen current, then `SELECT 1`."""
    fresh = open_sql(str(big.engine.url.render_as_string(hide_password=False)))
    try:
        with captured(fresh) as statements:
            for _ in range(3):
                admin.ready(Ledger(fresh))
        asked = [" ".join(s.split()) for s, _ in statements]
        assert asked == ["SELECT version_num FROM alembic_version", "SELECT 1", "SELECT 1"]
    finally:
        fresh.close()

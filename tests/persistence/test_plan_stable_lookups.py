"""0024: the hot lookups stay index lookups whatever the statistics say.

A session caches its plans. One made while the newest partition of `events` (or window of
`jobs`) was small, or VACUUMed while empty so that its statistics say zero rows, scanned that
partition whole at every lookup as it grew, for as long as the session lived: a ledger
VACUUMed empty and grown by 10k calls took an agent's p50 from 15 to 56 ms, and a 1M fill went
from about 40k jobs a minute to about 1k past 700k (docs/capacity.md).
Each test here plans on a ledger VACUUMed empty, grows it, and counts the scans."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import text

from ledger.persistence.appends import AppendStatus, JobAppend, LeaseChange
from ledger.persistence.engine import make_engine
from ledger.persistence.sql_store import SqlStore
from tests.factories import accepted, started
from tests.ledger_fill import fill

# Whole scans of the partitions (and the tick's table), in this transaction so far.
SEQ_SCANS = (
    "SELECT coalesce(sum(pg_stat_get_xact_numscans(c.oid)), 0) FROM pg_class c"
    " WHERE c.oid IN (SELECT inhrelid FROM pg_inherits"
    " WHERE inhparent IN ('events'::regclass, 'jobs'::regclass))"
    " OR c.oid IN ('ledger_ticks'::regclass, 'leases'::regclass)"
)
PREPARED = "SELECT count(*) FROM pg_prepared_statements WHERE statement LIKE '%FROM jobs WHERE%'"


@pytest.fixture
def store(pg_database: str) -> Iterator[SqlStore]:
    """A store of one connection (its cached plans are the ones measured), its plans made on a
    ledger whose statistics say every table is empty, then grown."""
    engine = make_engine(pg_database, pool_size=1)
    with engine.connect() as conn:
        conn.execution_options(isolation_level="AUTOCOMMIT").execute(text("VACUUM (ANALYZE)"))
    with SqlStore(engine) as opened:
        fill(opened, 12, batch=1)  # each lookup planned a dozen times: the plan is cached
        opened.sequence()
        fill(opened, 3000)
        opened.sequence()
        yield opened


def test_appends_and_ticks_never_scan_a_partition_whole(store: SqlStore) -> None:
    new = str(uuid.uuid4())
    lease = LeaseChange("start", 1, "w-1", datetime.now(UTC) + timedelta(seconds=30))
    with store.transaction() as tx:
        before = tx.conn.execute(text(SEQ_SCANS)).scalar_one()
        decided = tx.append_jobs([JobAppend(new, [accepted()], None)])
        claimed = tx.append_jobs([JobAppend(new, [started()], decided[0].job, lease=lease)])
        after = tx.conn.execute(text(SEQ_SCANS)).scalar_one()
    assert [decided[0].status, claimed[0].status] == [AppendStatus.OK, AppendStatus.OK]
    assert after - before == 0
    with store.transaction() as tx:
        before = tx.conn.execute(text(SEQ_SCANS)).scalar_one()
        assert tx.conn.execute(text("SELECT outcomes_sequence(true)")).scalar_one() == 2
        assert tx.conn.execute(text(SEQ_SCANS)).scalar_one() - before == 0


def test_a_claims_job_read_never_scans_a_window_whole(store: SqlStore) -> None:
    jobs = fill(store, 3)
    for _ in range(12):  # past psycopg's threshold and the server's: a plan would be cached
        with store.transaction() as tx:
            assert set(tx.jobs_by_id([j.job_id for j in jobs])) == {j.job_id for j in jobs}
    with store.transaction() as tx:
        before = tx.conn.execute(text(SEQ_SCANS)).scalar_one()
        tx.jobs_by_id([jobs[0].job_id])
        assert tx.conn.execute(text(SEQ_SCANS)).scalar_one() - before == 0
        assert tx.conn.execute(text(PREPARED)).scalar_one() == 0  # planned at each read


def test_point_reads_are_planned_each_time_or_refuse_the_scan(store: SqlStore) -> None:
    job = fill(store, 1)[0]
    for _ in range(12):
        assert store.read_job(job.job_id)[0] == job
    with store.transaction() as tx:  # the pool's one connection: the one read_job used
        assert tx.conn.execute(text(PREPARED)).scalar_one() == 0

    async def on_the_loop() -> tuple[object, str]:
        reads = store.loop_job_reads()
        assert reads is not None
        try:
            view, _ = await reads.read_job(job.job_id)
            conn = await reads._connect()
            try:
                cursor = await conn.execute("SHOW enable_seqscan")
                row = await cursor.fetchone()
            finally:
                await conn.close()
            return view, row[0] if row else ""
        finally:
            await reads.close()

    view, setting = asyncio.run(on_the_loop())
    assert (view, setting) == (job, "off")

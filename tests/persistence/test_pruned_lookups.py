"""0025: a job's writes and an agent's read look only where the job's events can be.

Each lookup over every partition of `events` descends one index per partition: at 100k jobs in
30 partitions an agent's p99 was 2.1x and a write 2x the one-partition ledger's. The append
function now asks a job stream's head, terminal event and event ids from the stream's first
write position on (kept in its jobs row, `first_position`), and a token's revocation from its
row in `tokens`, which a trigger keeps revoked. Each test here counts the index scans on the
partitions a job's events are not in, or checks an answer that crosses partitions."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta

import psycopg
import pytest
from sqlalchemy import text

from ledger.access import token_stream
from ledger.codes import Status
from ledger.errors import ImmutableLedgerError
from ledger.events import TokenCreated, TokenRevoked, job_stream
from ledger.persistence import migrate
from ledger.persistence.appends import AppendStatus, JobAppend, LeaseChange
from ledger.persistence.engine import libpq_dsn, make_engine
from ledger.persistence.loop_reads import POINT_READS, job_statement
from ledger.persistence.sql_store import SqlStore
from tests.databases import create_database, drop_database, pg_url, require_postgres, unique_name
from tests.factories import accepted, new, started, succeeded

SIZE = 30  # positions a partition: ten jobs' events
TOKEN_ROW = "SELECT * FROM tokens WHERE token_id = :t"
# Index scans, in this transaction so far, on the partitions of `events` wholly below a position.
SCANS_BELOW = (
    "SELECT coalesce(sum(pg_stat_get_xact_numscans(i.indexrelid)), 0) FROM pg_index i"
    " JOIN ledger_partitions p ON i.indrelid = format('events_p%s', p.lower)::regclass"
    " WHERE p.upper <= :below"
)
EVENTS_SCANS = (
    "SELECT coalesce(sum(pg_stat_get_xact_numscans(i.indexrelid)), 0) FROM pg_index i"
    " WHERE i.indrelid IN (SELECT inhrelid FROM pg_inherits"
    " WHERE inhparent = 'events'::regclass)"
)
# Each partition of `jobs` with its indexes' scans so far. The backend's counters add up until
# it reports them (Postgres 15: at most once a second), across transactions: a read's scans are
# the difference before and after it.
JOBS_SCANS_BY_PARTITION = (
    "SELECT i.indrelid, sum(pg_stat_get_xact_numscans(i.indexrelid)) FROM pg_index i"
    " WHERE i.indrelid IN (SELECT inhrelid FROM pg_inherits WHERE inhparent = 'jobs'::regclass)"
    " GROUP BY i.indrelid"
)


@contextmanager
def partitioned_store(
    monkeypatch: pytest.MonkeyPatch, prefix: str, pool_size: int = 2
) -> Iterator[SqlStore]:
    """A Postgres ledger of partitions of SIZE positions, grown to six of them (the size is
    fixed at the first migration, so no template database serves)."""
    require_postgres()
    monkeypatch.setenv("OUTCOMES_PARTITION_SIZE", str(SIZE))
    name = unique_name(prefix)
    create_database(name)
    engine = make_engine(pg_url(name), pool_size=pool_size)
    try:
        migrate.upgrade(engine)
        with SqlStore(engine) as opened:
            grow(opened, 60)
            yield opened
    finally:
        engine.dispose()
        drop_database(name)


@pytest.fixture
def store(monkeypatch: pytest.MonkeyPatch) -> Iterator[SqlStore]:
    with partitioned_store(monkeypatch, "outcomes_pruned") as opened:
        yield opened


def three_writes(store: SqlStore, count: int) -> list[str]:
    """`count` jobs decided, claimed and ended (partitions made ahead first)."""
    store.make_partitions(4)
    ids = [str(uuid.uuid4()) for _ in range(count)]
    decided = store.append_jobs([JobAppend(i, [accepted()], None) for i in ids])
    lease = LeaseChange("start", 1, "w-1", datetime.now(UTC) + timedelta(seconds=30))
    claimed = store.append_jobs(
        [JobAppend(i, [started()], d.job, lease=lease) for i, d in zip(ids, decided, strict=True)]
    )
    ended = store.append_jobs(
        [
            JobAppend(i, [succeeded(n=1)], c.job, LeaseChange("drop", 1))
            for i, c in zip(ids, claimed, strict=True)
        ]
    )
    assert {e.status for e in ended} == {AppendStatus.OK}
    return ids


def grow(store: SqlStore, jobs: int) -> None:
    for _ in range(jobs // 10):
        three_writes(store, 10)


def written(store: SqlStore) -> int:
    with store.connection() as conn:
        return int(conn.execute(text("SELECT outcomes_written_position()")).scalar_one())


def test_a_jobs_writes_read_no_partition_below_its_first_event(store: SqlStore) -> None:
    first = written(store) + 1  # the new job's decision
    assert first > 4 * SIZE  # four partitions lie wholly below it
    job = str(uuid.uuid4())
    lease = LeaseChange("start", 1, "w-1", datetime.now(UTC) + timedelta(seconds=30))
    with store.transaction() as tx:
        before = tx.conn.execute(text(SCANS_BELOW), {"below": first}).scalar_one()
        decided = tx.append_jobs([JobAppend(job, [accepted()], None)])[0]
        claimed = tx.append_jobs([JobAppend(job, [started()], decided.job, lease=lease)])[0]
        ended = tx.append_jobs(
            [JobAppend(job, [succeeded(n=1)], claimed.job, LeaseChange("drop", 1))]
        )[0]
        after = tx.conn.execute(text(SCANS_BELOW), {"below": first}).scalar_one()
        kept = tx.conn.execute(
            text("SELECT first_position FROM jobs WHERE job_id = :j"), {"j": job}
        ).scalar_one()
    assert [decided.status, claimed.status, ended.status] == [AppendStatus.OK] * 3
    assert decided.job is not None and kept == decided.job.ledger_position == first
    assert after - before == 0


@pytest.mark.parametrize("unknown_start", [False, True], ids=["kept", "from-before-0025"])
def test_answers_across_partitions_are_the_whole_streams(
    store: SqlStore, unknown_start: bool
) -> None:
    """A job decided and claimed, then the ledger grown past its partition: its head, a
    retried write's event and its terminal event are still found (also for a row with no
    `first_position`, as every row before 0025: then every partition is read)."""
    job = str(uuid.uuid4())
    decided = store.append_jobs([JobAppend(job, [accepted()], None)])[0]
    lease = LeaseChange("start", 1, "w-1", datetime.now(UTC) + timedelta(seconds=30))
    claim = started()
    claimed = store.append_jobs([JobAppend(job, [claim], decided.job, lease=lease)])[0]
    assert claimed.job is not None
    grow(store, 2 * SIZE // 3)  # two partitions on
    if unknown_start:
        with store.transaction() as tx:
            forget = "UPDATE jobs SET first_position = NULL WHERE job_id = :j"
            tx.conn.execute(text(forget), {"j": job})
    drop = LeaseChange("drop", 1)
    stale = store.append_jobs([JobAppend(job, [succeeded(n=2)], decided.job, drop)])[0]
    assert stale.status is AppendStatus.CONFLICT  # the head is the claim, two partitions back
    # An event whose id the stream holds (a retried write that landed), after the head.
    reused = succeeded(n=2).model_copy(update={"event_id": claim.event_id})
    again = store.append_jobs([JobAppend(job, [reused], claimed.job, drop)])[0]
    assert again.status is AppendStatus.DUPLICATE
    ended = store.append_jobs([JobAppend(job, [succeeded(n=2)], claimed.job, drop)])[0]
    assert ended.status is AppendStatus.OK and ended.job is not None
    # A writer whose view forgot the outcome (its head is right): the server finds it.
    forgot = ended.job.model_copy(update={"status": Status.RUNNING})
    twice = store.append_jobs([JobAppend(job, [succeeded(n=3)], forgot, drop)])[0]
    assert twice.status is AppendStatus.TERMINAL
    assert len(store.read_stream(job_stream(job))) == 3


def test_a_new_job_whose_row_exists_is_a_conflict(store: SqlStore) -> None:
    """A job's first write sent twice (a retry after a lost answer): the second finds the row
    the first wrote, so the stream is not new."""
    job = str(uuid.uuid4())
    decision = accepted()
    assert store.append_jobs([JobAppend(job, [decision], None)])[0].status is AppendStatus.OK
    grow(store, 30)
    again = store.append_jobs([JobAppend(job, [decision], None)])[0]
    assert again.status is AppendStatus.CONFLICT
    assert len(store.read_stream(job_stream(job))) == 1


def _token(store: SqlStore) -> str:
    token = uuid.uuid4().hex
    created = TokenCreated(
        token_id=token, account="acme", role="agent", token_hash="cd" * 32, tools=None
    )
    store.append(token_stream(token), [new(created, "operator:alice")], 0)
    return token


def refused() -> pytest.RaisesContext[ImmutableLedgerError]:
    return pytest.raises(ImmutableLedgerError, match="revoked and stays so")


def test_a_revocation_made_partitions_ago_is_seen_and_kept(store: SqlStore) -> None:
    token = _token(store)
    job = three_writes(store, 1)[0]
    store.append(token_stream(token), [new(TokenRevoked(token_id=token), "operator:alice")], 1)
    grow(store, 30)

    def stands() -> tuple[AppendStatus, bool]:
        late = JobAppend(str(uuid.uuid4()), [accepted()], None, token_id=token)
        return store.append_jobs([late])[0].status, store.read_job(job, token)[1]

    assert stands() == (AppendStatus.REVOKED, False)
    # The application's role writes the read models; no row it writes un-revokes a token.
    with store.transaction() as tx:
        row = tx.conn.execute(text(TOKEN_ROW), {"t": token}).mappings().one()
    undo = "UPDATE tokens SET revoked = false WHERE token_id = :t"
    with refused(), store.transaction() as tx:
        tx.conn.execute(text(undo), {"t": token})
    with store.transaction() as tx:  # allowed: no row is no token
        tx.conn.execute(text("DELETE FROM tokens WHERE token_id = :t"), {"t": token})
    assert stands() == (AppendStatus.REVOKED, False)
    again = "INSERT INTO tokens SELECT (jsonb_populate_record(NULL::tokens, :row)).*"
    back = dict(row) | {"revoked": False, "view": row["view"] | {"revoked": False}}
    with refused(), store.transaction() as tx:
        tx.conn.execute(text(again), {"row": json.dumps(back, default=str)})
    assert stands() == (AppendStatus.REVOKED, False)


def test_an_agents_read_looks_in_one_window_and_no_partition_of_events(store: SqlStore) -> None:
    """The agents' GET as the API's loop sends it (with its plan settings), prepared past
    psycopg's threshold: the job's window of `jobs`, the token's row, and nothing else."""
    token = _token(store)
    jobs = three_writes(store, 8)
    dsn = libpq_dsn(store.engine, *POINT_READS)
    with psycopg.connect(dsn) as conn:
        # Generic plans: left to choose, the plan cache planned each read again (5.4 ms a
        # read at 30 partitions, 0.26 ms generic).
        assert conn.execute("SHOW plan_cache_mode").fetchone() == ("force_generic_plan",)
        for job in jobs:
            statement, params = job_statement(job, token)
            with conn.transaction():
                events_before = conn.execute(EVENTS_SCANS).fetchone()
                jobs_before = dict(conn.execute(JOBS_SCANS_BY_PARTITION).fetchall())
                row = conn.execute(statement, params).fetchone()
                events_after = conn.execute(EVENTS_SCANS).fetchone()
                jobs_after = dict(conn.execute(JOBS_SCANS_BY_PARTITION).fetchall())
            assert row is not None and row[0] is not None and row[1] is False
            assert events_before is not None and events_after is not None
            windows = sum(1 for part, n in jobs_after.items() if n > jobs_before[part])
            assert (events_after[0] - events_before[0], windows) == (0, 1)


def test_the_loop_reads_answer_a_revoked_token(store: SqlStore) -> None:
    token = _token(store)
    job = three_writes(store, 1)[0]
    store.append(token_stream(token), [new(TokenRevoked(token_id=token), "operator:alice")], 1)

    async def read() -> tuple[bool, bool]:
        reads = store.loop_job_reads()
        assert reads is not None
        try:
            return (await reads.read_job(job, token))[1], (await reads.read_job(job, "nobody"))[1]
        finally:
            await reads.close()

    assert asyncio.run(read()) == (False, False)


def test_the_tick_and_the_append_never_plan_in_parallel_and_the_append_plans_once(
    store: SqlStore,
) -> None:
    """Over many partitions the planner made the tick's lookup a parallel one (starting its
    workers cost 22.7 ms an idle tick at 30 partitions, 5.7 ms serial), and the plan cache
    planned the append's lookups again at every call: both are settings of the functions."""
    query = text(
        "SELECT p.proname, p.proconfig FROM pg_proc p"
        " WHERE p.proname IN ('outcomes_unsequenced', 'outcomes_append_jobs')"
    )
    with store.connection() as conn:
        found = {str(name): set(config) for name, config in conn.execute(query)}
    assert "max_parallel_workers_per_gather=0" in found["outcomes_unsequenced"]
    assert {"max_parallel_workers_per_gather=0", "plan_cache_mode=force_generic_plan"} <= found[
        "outcomes_append_jobs"
    ]

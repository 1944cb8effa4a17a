"""`jobs` partitioned by creation time (migration 0020) on Postgres: an archive drops each
partition whose jobs are all archived, deletes the archived rows of the others, and the kept
counts, the application role's work and the maker of partitions ahead all go on; the migration
moves a ledger's jobs, v4 and v7 ids alike, intact."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import Engine, select, text

from ledger.persistence import migrate
from ledger.persistence.engine import make_engine
from ledger.persistence.schema import NOT_FOLDED, jobs
from ledger.persistence.sql_store import SqlStore
from ledger.queries import JobCount
from ledger.runtime.ledger import Ledger
from ledger.services import archive, audit
from ledger.uuid7 import uuid7
from tests.databases import APP_ROLE, as_role, create_database, drop_database, pg_url, unique_name
from tests.factories import accepted, open_sql, succeeded
from tests.kept_counts import assert_kept_counts_exact, full_job_counts, sorted_counts
from tests.plugins.archiving import ended_jobs, open_job, soon

pytestmark = pytest.mark.postgres

HOUR_MS = 3_600_000


@pytest.fixture
def store(tiny_url: str) -> Iterator[SqlStore]:
    with open_sql(tiny_url) as opened:
        yield opened


def windows(store: SqlStore) -> list[int]:
    """The lower bounds (ms) of the partitions of `jobs` made and not dropped."""
    with store.connection() as conn:
        rows = conn.execute(
            text("SELECT lower_ms FROM jobs_partitions WHERE dropped_at IS NULL ORDER BY 1")
        )
        return [int(r[0]) for r in rows]


def ids_in(window: int) -> Iterator[str]:
    """UUIDv7 ids made within the window starting at `window` ms."""
    n = 0
    while True:
        n += 1
        yield str(uuid7(window + 1000 * n))


def partition_of(store: SqlStore, job_id: str) -> str | None:
    with store.connection() as conn:
        found = conn.execute(
            text("SELECT tableoid::regclass::text FROM jobs WHERE job_id = :id"), {"id": job_id}
        ).scalar()
        return str(found) if found is not None else None


def exists(store: SqlStore, table: str) -> bool:
    with store.connection() as conn:
        return bool(conn.execute(text("SELECT to_regclass(:t) IS NOT NULL"), {"t": table}).scalar())


@pytest.mark.parametrize("tiny_url", ["postgres"], indirect=True)
def test_a_partition_of_archived_jobs_is_dropped_and_one_with_a_live_job_stays(
    store: SqlStore, tmp_path: Path
) -> None:
    first, second = windows(store)[:2]
    old = ended_jobs(store, 6, ids=ids_in(first))  # write positions 1..14
    legacy = ended_jobs(store, 2)  # v4 ids: the legacy or default partitions
    later = ended_jobs(store, 10, ids=ids_in(second + HOUR_MS // 2))
    live = open_job(store, job_id=str(uuid7(second + 10)))  # never ended: its range stays
    ended_jobs(store, 4, ids=ids_in(second + HOUR_MS // 4))
    assert {partition_of(store, j) for j in old} == {f"jobs_t{first}"}
    assert partition_of(store, live) == f"jobs_t{second}"
    rows_before = store.engine.connect().execute(select(jobs.c.job_id)).scalars().all()

    done = archive.archive(Ledger(store), tmp_path, soon())

    archived = {j for j in rows_before if store.archived_job(j) is not None}
    assert set(old) | set(legacy) <= archived
    assert archived & set(later), "the second window holds archived jobs too"
    # The first window held archived jobs alone: its partition is gone, and listed so.
    assert not exists(store, f"jobs_t{first}")
    assert first not in windows(store)
    # The second holds a live job: it stays, its archived rows deleted, the others kept.
    assert exists(store, f"jobs_t{second}")
    with store.connection() as conn:
        left = set(conn.execute(select(jobs.c.job_id)).scalars())
    assert left == set(rows_before) - archived and live in left
    assert done.manifest.counts.jobs == len(archived)
    assert_kept_counts_exact(store)  # the dropped rows were taken off the counts
    store.compact_counts()
    assert_kept_counts_exact(store)
    found = audit.verify_all(Ledger(store))
    assert found.ok, (found.chain.problems[:3], found.read_models.problems[:3])
    # The live job still moves, and its window takes new jobs.
    with store.reading() as reads:
        view = reads.job(live)
    assert view is not None and not view.terminal
    store.append(f"job-{live}", [succeeded()], 1)
    assert_kept_counts_exact(store)


@pytest.mark.parametrize("tiny_url", ["postgres"], indirect=True)
def test_the_application_role_writes_reads_and_makes_partitions_but_cannot_drop_them(
    store: SqlStore, tiny_url: str
) -> None:
    newest = windows(store)[-1]
    app = open_sql(as_role(tiny_url, APP_ROLE))
    try:
        made = ended_jobs(app, 3, ids=ids_in(newest))  # type: ignore[arg-type]
        stray = str(uuid7(newest + 30 * HOUR_MS))  # no window yet: the default partition
        app.append(f"job-{stray}", [accepted()], 0)
        assert partition_of(app, stray) == "jobs_default"
        assert app.make_partitions(40) > 0  # windows ahead: the stray moves into its own
        assert partition_of(app, stray) == f"jobs_t{newest + 30 * HOUR_MS}"
        assert partition_of(app, made[0]) == f"jobs_t{newest}"
        with app.reading() as reads:
            assert reads.job(stray) is not None
        assert_kept_counts_exact(app)
        with app.engine.begin() as conn:
            for statement in (
                f"DELETE FROM jobs_t{newest}",
                f"ALTER TABLE jobs DETACH PARTITION jobs_t{newest}",
                f"DROP TABLE jobs_t{newest}",
                "UPDATE jobs_partitions SET dropped_at = now()",
            ):
                refused = pytest.raises(Exception, match=r"permission denied|must be owner")
                with refused, conn.begin_nested():
                    conn.execute(text(statement))
    finally:
        app.engine.dispose()


def _kept_before_0028(engine: Engine) -> list[JobCount]:
    """The kept counts as a ledger before 0028 holds them (no change of status in one delta
    row: the readers of today's code name columns it has not)."""
    query = text(
        "SELECT accepted, status, code, tool, sum(jobs) FROM (SELECT accepted, status, code,"
        " tool, jobs FROM job_counts UNION ALL SELECT accepted, status, code, tool, jobs"
        " FROM job_count_deltas) c GROUP BY 1, 2, 3, 4 HAVING sum(jobs) <> 0"
    )
    with engine.connect() as conn:
        found = [
            JobCount(bool(a), s, c or None, t, int(n)) for a, s, c, t, n in conn.execute(query)
        ]
    return sorted_counts(found)


def _rows(engine: Engine) -> list[tuple[object, ...]]:
    with engine.connect() as conn:
        # The folded columns: a ledger at 0019 has no `first_position` (0025) yet.
        folded = [c for c in jobs.c if c.name not in NOT_FOLDED]
        return [tuple(r) for r in conn.execute(select(*folded).order_by(jobs.c.job_id))]


def test_the_migration_moves_a_ledgers_jobs_v4_and_v7_intact(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from tests.databases import require_postgres

    require_postgres()
    monkeypatch.setenv("OUTCOMES_JOBS_PARTITION_HOURS", "1")
    name = unique_name("outcomes_jobs_mig")
    create_database(name)
    engine = make_engine(pg_url(name))
    try:
        migrate.upgrade(engine, "0019")
        store = SqlStore(engine)
        now_ms = uuid7().int >> 80
        two_days_ago = now_ms - 48 * HOUR_MS
        v4 = [str(uuid.uuid4()) for _ in range(12)]
        v7 = [str(uuid7(two_days_ago + n)) for n in range(3)] + [str(uuid7()) for _ in range(3)]
        for job_id in v4 + v7:
            store.append(f"job-{job_id}", [accepted(), succeeded()], 0)
        open_job(store, job_id=str(uuid7()))
        before = _rows(engine)
        migrate.upgrade(engine)
        assert _rows(engine) == before
        assert_kept_counts_exact(store)
        # The old v7 ids have windows of their own (from the oldest), v4 ids the legacy ones.
        oldest = two_days_ago // HOUR_MS * HOUR_MS
        assert partition_of(store, v7[0]) == f"jobs_t{oldest}"
        assert partition_of(store, v7[-1]) == f"jobs_t{now_ms // HOUR_MS * HOUR_MS}"
        assert {partition_of(store, j) for j in v4} <= {
            "jobs_legacy_low",
            "jobs_legacy_high",
            "jobs_default",
        }
        # The idempotency key is still one per account, and writes go on.
        store.append(f"job-{uuid7()}", [accepted()], 0)
        found = audit.verify_all(Ledger(store))
        assert found.ok, (found.chain.problems[:3], found.read_models.problems[:3])
        after = _rows(engine)
        migrate.downgrade(engine, "0019")
        assert _rows(engine) == after
        assert _kept_before_0028(engine) == full_job_counts(store)
    finally:
        engine.dispose()
        drop_database(name)


@pytest.mark.parametrize("tiny_url", ["postgres"], indirect=True)
def test_an_idempotency_key_is_one_per_account_across_partitions(store: SqlStore) -> None:
    """The key's unique index is each partition's own: the writers look in every one."""
    from ledger.errors import IdempotencyKeyTakenError
    from ledger.events import JobAccepted
    from ledger.persistence.appends import AppendStatus, JobAppend
    from tests.factories import new

    first, second = windows(store)[:2]

    def keyed() -> JobAccepted:
        return JobAccepted(
            account="acme", tool="tracker.read_issue", args={}, idempotency_key="once"
        )

    holder = str(uuid7(first + 5))
    store.append(f"job-{holder}", [new(keyed())], 0)
    with pytest.raises(IdempotencyKeyTakenError):
        store.append(f"job-{uuid7(second + 5)}", [new(keyed())], 0)
    (answer,) = store.append_jobs([JobAppend(str(uuid7(second + 6)), [new(keyed())], None)])
    assert answer.status is AppendStatus.IDEMPOTENCY
    assert answer.holder is not None and answer.holder.job_id == holder

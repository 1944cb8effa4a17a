"""The append function's reads keep good plans on a new ledger (migrations 0007, 0009).

PL/pgSQL caches a statement's plan per session. Planned while `jobs` is empty (a new ledger,
before autovacuum's first ANALYZE), the plain idempotency lookup of a keyed submit walked
another index over every job of the account, so each submit cost more than the one before.
0007 planned it at every call instead; 0009 caches it again, worded so that the unique index
wins even on an empty table's estimates. The database's own counters say which index each
lookup used: no statistics, no timing."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

import psycopg
import pytest

from ledger.events import JobAccepted
from ledger.persistence.appends import AppendStatus, JobAppend, QuotaCheck
from ledger.persistence.engine import make_engine
from ledger.persistence.sql_store import SqlStore
from tests.concurrent_writers import psycopg_dsn, wait_until
from tests.factories import new

pytestmark = pytest.mark.postgres

SUBMITS = 800


# `jobs` is partitioned (0020): each partition's index counts its scans, under the name of the
# parent's index it is a partition of; the idempotency key's is each partition's own
# (`<partition>_idempotency`), counted under the name of the unique index it stands for.
_INDEX_SCANS = r"""
SELECT coalesce(parent.relname,
                CASE WHEN s.indexrelname LIKE '%\_idempotency'
                     THEN 'uq_jobs_account_idempotency_key' ELSE s.indexrelname END),
       sum(s.idx_scan)::bigint
  FROM pg_stat_user_indexes s
  LEFT JOIN pg_inherits ih ON ih.inhrelid = s.indexrelid
  LEFT JOIN pg_class parent ON parent.oid = ih.inhparent
 WHERE s.relname = 'jobs'
    OR s.relid IN (SELECT t.inhrelid FROM pg_inherits t WHERE t.inhparent = 'jobs'::regclass)
 GROUP BY 1
"""


def index_scans(url: str) -> dict[str, int]:
    with psycopg.connect(psycopg_dsn(url), autocommit=True) as conn:
        rows = conn.execute(_INDEX_SCANS).fetchall()
    return {name: int(scans) for name, scans in rows}


def test_keyed_submits_on_a_new_ledger_find_their_key_through_the_unique_index(
    pg_database: str,
) -> None:
    before = index_scans(pg_database)
    with SqlStore(make_engine(pg_database)) as store:
        for _ in range(SUBMITS):
            payload = JobAccepted(
                account="acme",
                tool="tracker.read_issue",
                args={"issue_ref": "T-1"},
                idempotency_key=uuid.uuid4().hex,
            )
            (done,) = store.append_jobs([JobAppend(str(uuid.uuid4()), [new(payload)], None)])
            assert done.status is AppendStatus.OK

    # The store is closed: its server processes report their counters as they exit.
    def counted() -> bool:
        return index_scans(pg_database)["pk_jobs"] - before["pk_jobs"] >= SUBMITS

    wait_until(counted, 10.0, "the server to count the submits")
    after = index_scans(pg_database)
    # Every lookup, the first ones (planned on an empty table) included, takes the unique
    # index; the plain lookup cached then walked `ix_jobs_quota`, and 0007's, planned at each
    # call, did too until the table had grown.
    unique, quota = "uq_jobs_account_idempotency_key", "ix_jobs_quota"
    assert after[unique] - before[unique] >= SUBMITS
    assert after[quota] - before[quota] == 0


def seq_scans(url: str) -> int:
    with psycopg.connect(psycopg_dsn(url), autocommit=True) as conn:
        row = conn.execute("SELECT seq_scan FROM pg_stat_user_tables WHERE relname = 'jobs'")
        found = row.fetchone()
    assert found is not None
    return int(found[0])


def test_quota_counts_on_a_new_ledger_walk_the_quota_index(pg_database: str) -> None:
    """0016: the quota is counted inside the function, with a cached plan. Planned on an empty
    table, the plain count walked every job of the account through the idempotency index; it
    is worded so that `ix_jobs_quota` (account, tool, created_at) takes it."""
    before, scanned = index_scans(pg_database), seq_scans(pg_database)
    since = datetime.now(UTC) - timedelta(hours=1)
    n = SUBMITS // 4
    with SqlStore(make_engine(pg_database)) as store:
        for _ in range(n):
            payload = JobAccepted(account="acme", tool="a.metered", args={})
            quota = QuotaCheck(limit=10**6, since=since)
            item = JobAppend(str(uuid.uuid4()), [new(payload)], None, quota=quota)
            assert store.append_jobs([item])[0].status is AppendStatus.OK

    def counted() -> bool:
        return index_scans(pg_database)["pk_jobs"] - before["pk_jobs"] >= n

    wait_until(counted, 10.0, "the server to count the submits")
    after = index_scans(pg_database)
    unique, quota_index = "uq_jobs_account_idempotency_key", "ix_jobs_quota"
    assert after[quota_index] - before[quota_index] >= n
    assert after[unique] - before[unique] == 0  # no key: only the wrong plan would walk it
    assert seq_scans(pg_database) == scanned

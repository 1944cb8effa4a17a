"""The full counts the kept counts must equal: a GROUP BY over every row of `jobs` (SQL) or over
every view (memory), and the reconciler's findings counted from every event. Slow on purpose:
they are the reference, read by the tests alone."""

from __future__ import annotations

from collections import Counter
from datetime import datetime

from sqlalchemy import func, select

from ledger.event_log import FINDER, FINDINGS, finding_cause
from ledger.persistence.base import Store
from ledger.persistence.memory import MemoryStore
from ledger.persistence.schema import jobs
from ledger.persistence.sql_reads import SqlReads
from ledger.persistence.sql_store import SqlStore
from ledger.queries import FindingCount, JobCount, JobSummary

Group = tuple[str, str, bool, str, str | None]  # account, tool, accepted, status, code


def full_groups(
    store: Store,
    account: str | None = None,
    tool: str | None = None,
    since: datetime | None = None,
    until: datetime | None = None,
) -> Counter[Group]:
    """Every job of the scope counted by its group, the slow way."""
    found: Counter[Group] = Counter()
    if isinstance(store, MemoryStore):
        with store.reading():  # reentrant: a caller's snapshot may hold it
            views = list(store.state.jobs.values())
        for v in views:
            if account not in (None, v.account) or tool not in (None, v.tool):
                continue
            if (since and v.created_at < since) or (until and v.created_at >= until):
                continue
            code = v.code.value if v.code else None
            found[v.account, v.tool, v.accepted, v.status.value, code] += 1
        return found
    assert isinstance(store, SqlStore)
    keys = (jobs.c.account, jobs.c.tool, jobs.c.accepted, jobs.c.status, jobs.c.code)
    query = select(*keys, func.count()).group_by(*keys)
    if account is not None:
        query = query.where(jobs.c.account == account)
    if tool is not None:
        query = query.where(jobs.c.tool == tool)
    if since is not None:
        query = query.where(jobs.c.created_at >= since)
    if until is not None:
        query = query.where(jobs.c.created_at < until)
    with store.connection() as conn:
        for a, t, accepted, status, code, n in conn.execute(query):
            found[a, t, bool(accepted), status, code] += int(n)
    return found


def counts_agree_in_one_snapshot(store: Store) -> bool:
    """In one snapshot of the ledger (REPEATABLE READ on Postgres, a WAL read on SQLite, the
    lock in memory), the kept counts equal a GROUP BY over the jobs: true at any instant, even
    while writers commit and folds run."""
    with store.snapshot() as reads:
        kept = sorted_counts(reads.count_jobs())
        if isinstance(store, MemoryStore):
            return kept == full_job_counts(store)
        assert isinstance(reads, SqlReads)
        keys = (jobs.c.accepted, jobs.c.status, jobs.c.code, jobs.c.tool)
        rows = reads.conn.execute(select(*keys, func.count()).group_by(*keys))
        full = [JobCount(bool(a), s, c, t, int(n)) for a, s, c, t, n in rows]
    return kept == sorted_counts(full)


def full_summary(
    store: Store,
    account: str | None = None,
    tool: str | None = None,
    since: datetime | None = None,
    until: datetime | None = None,
) -> JobSummary:
    groups = full_groups(store, account, tool, since, until)
    return JobSummary.from_groups((s, c, t, a, n) for (a, t, _, s, c), n in groups.items())


def full_job_counts(store: Store) -> list[JobCount]:
    by: Counter[tuple[bool, str, str | None, str]] = Counter()
    for (_, tool, accepted, status, code), n in full_groups(store).items():
        by[accepted, status, code, tool] += n
    return sorted((JobCount(*k, jobs=n) for k, n in by.items()), key=_order)


def sorted_counts(found: list[JobCount]) -> list[JobCount]:
    return sorted(found, key=_order)


def _order(c: JobCount) -> tuple[object, ...]:
    return (c.accepted, c.status, c.code or "", c.tool)


def full_findings(store: Store) -> dict[tuple[str, str], tuple[int, datetime]]:
    """The reconciler's findings counted from every event: (type, cause) -> (count, newest)."""
    found: dict[tuple[str, str], tuple[int, datetime]] = {}
    for event in store.iter_events():
        if event.actor != FINDER or event.type not in FINDINGS:
            continue
        key = (event.type, finding_cause(event.payload))
        n, last = found.get(key, (0, event.recorded_at))
        found[key] = (n + 1, max(last, event.recorded_at))
    return found


def kept_findings(found: list[FindingCount]) -> dict[tuple[str, str], tuple[int, datetime]]:
    return {(f.type, f.cause): (f.events, f.last_at) for f in found}


def assert_kept_counts_exact(store: Store) -> None:
    """Every kept count the readers take equals the full count, for every account and tool."""
    every = full_groups(store)
    with store.reading() as reads:
        assert sorted_counts(reads.count_jobs()) == full_job_counts(store)
        assert reads.summarize_jobs(None) == full_summary(store)
        for account in {g[0] for g in every} | {"nobody"}:
            assert reads.summarize_jobs(account) == full_summary(store, account)
            for tool in {g[1] for g in every if g[0] == account}:
                kept = reads.summarize_jobs(account, tool)
                assert kept == full_summary(store, account, tool), (account, tool)
                assert reads.count_statuses(account, tool) == kept.by_status
        waiting = sum(n for g, n in every.items() if g[3] in ("queued", "retrying"))
        assert reads.waiting_count() == waiting
        assert kept_findings(reads.count_findings()) == full_findings(store)

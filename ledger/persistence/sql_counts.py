"""The kept counts in SQL (migration 0017): a summary, a scrape or a status reads groups of
jobs, never every job.

Each read is one statement over the totals and the deltas not yet folded into them (Postgres;
SQLite's triggers update the totals directly and leave the deltas empty), so it is exact at
that statement's snapshot whatever a fold (`outcomes_compact_counts`) does meanwhile. A
since/until range is counted from the hourly totals for its whole hours and from the jobs
themselves, through `ix_jobs_created_at`, for the partial hours at its ends: exact, and it
costs the groups of the range plus the jobs created in at most two hours.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import (
    Connection,
    Integer,
    Select,
    Table,
    cast,
    delete,
    func,
    insert,
    literal_column,
    select,
    text,
    union_all,
)

from ledger.clock import utc
from ledger.codes import Status
from ledger.event_log import FINDINGS
from ledger.persistence import sql_churn
from ledger.persistence.schema import (
    events,
    finding_count_deltas,
    finding_counts,
    job_count_deltas,
    job_counts,
    job_counts_hourly,
    jobs,
)
from ledger.queries import FindingCount, JobCount, JobSummary

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_HOUR = timedelta(hours=1)
_WAITING = (Status.QUEUED.value, Status.RETRYING.value)
_COMPACT = text("SELECT outcomes_compact_counts()")
_RECOUNT = text("SELECT outcomes_recount()")
# A rebuild rewrites every jobs row: the triggers skip them, and it counts the rows whole.
_RECOUNTING = text("SET LOCAL outcomes.recounting = 'on'")
_COUNT_COLUMNS = ("account", "tool", "accepted", "status", "code")


def hour_of(moment: datetime) -> int:
    """Whole hours since 1970-01-01 UTC (the `hour` of the hourly counts)."""
    return (utc(moment) - _EPOCH) // _HOUR


def hour_start(hour: int) -> datetime:
    return _EPOCH + hour * _HOUR


@dataclass(frozen=True)
class Scope:
    """Which jobs a count covers: one account and tool (None: any), created since/until."""

    account: str | None = None
    tool: str | None = None
    since: datetime | None = None
    until: datetime | None = None
    statuses: tuple[str, ...] | None = None


def _kept(table: Table, scope: Scope, hours: tuple[int | None, int | None] | None) -> Select[Any]:
    """A counts table's rows of the scope, within `hours` [first, last) where given."""
    query = select(*(table.c[c] for c in _COUNT_COLUMNS), table.c.jobs.label("jobs"))
    return _within(query.where(*_equal(table, scope)), table, hours)


def _within(
    query: Select[Any], table: Table, hours: tuple[int | None, int | None] | None
) -> Select[Any]:
    if hours is not None:
        first, last = hours
        if first is not None:
            query = query.where(table.c.hour >= first)
        if last is not None:
            query = query.where(table.c.hour < last)
    return query


def _deltas(scope: Scope, hours: tuple[int | None, int | None] | None) -> list[Select[Any]]:
    """The pending deltas of the scope: each row's +jobs to its group, and a change of status's
    -jobs to the group it left (`from_status`, `from_code`: same hour, account and tool)."""
    left = select(
        *(job_count_deltas.c[c] for c in _COUNT_COLUMNS[:3]),
        job_count_deltas.c.from_status.label("status"),
        job_count_deltas.c.from_code.label("code"),
        (-job_count_deltas.c.jobs).label("jobs"),
    ).where(job_count_deltas.c.from_status.is_not(None))
    left = left.where(*_equal(job_count_deltas, replace(scope, statuses=None)))
    if scope.statuses is not None:
        left = left.where(job_count_deltas.c.from_status.in_(scope.statuses))
    return [_kept(job_count_deltas, scope, hours), _within(left, job_count_deltas, hours)]


def _equal(table: Table, scope: Scope) -> list[Any]:
    found = []
    if scope.account is not None:
        found.append(table.c.account == scope.account)
    if scope.tool is not None:
        found.append(table.c.tool == scope.tool)
    if scope.statuses is not None:
        found.append(table.c.status.in_(scope.statuses))
    return found


def _counted(scope: Scope, start: datetime | None, end: datetime | None) -> Select[Any]:
    """The jobs of the scope created in [start, end), counted by group from `jobs` itself."""
    query = select(
        *(jobs.c[c] for c in _COUNT_COLUMNS[:-1]),
        func.coalesce(jobs.c.code, "").label("code"),
        func.count().label("jobs"),
    ).where(*_equal(jobs, scope))
    if start is not None:
        query = query.where(jobs.c.created_at >= start)
    if end is not None:
        query = query.where(jobs.c.created_at < end)
    return query.group_by(*(jobs.c[c] for c in _COUNT_COLUMNS[:-1]), jobs.c.code)


def _parts(scope: Scope) -> list[Select[Any]]:
    """The statements whose rows, summed by group, are the scope's counts."""
    if scope.since is None and scope.until is None:
        return [_kept(job_counts, scope, None), *_deltas(scope, None)]
    since = utc(scope.since) if scope.since is not None else None
    until = utc(scope.until) if scope.until is not None else None
    first = -(-(since - _EPOCH) // _HOUR) if since is not None else None  # the first whole hour
    last = hour_of(until) if until is not None else None  # the hour `until` falls in
    if first is not None and last is not None and first >= last:
        return [_counted(scope, since, until)]  # no whole hour: under two hours of jobs
    hours = (first, last)
    parts = [_kept(job_counts_hourly, scope, hours), *_deltas(scope, hours)]
    if since is not None and first is not None and hour_start(first) > since:
        parts.append(_counted(scope, since, hour_start(first)))
    if until is not None and last is not None and hour_start(last) < until:
        parts.append(_counted(scope, hour_start(last), until))
    return parts


def _summed(scope: Scope, *by: str) -> Select[Any]:
    groups = union_all(*_parts(scope)).subquery("counted")
    keys = [groups.c[c] for c in by]
    total = func.sum(groups.c.jobs)
    return select(*keys, total.label("jobs")).group_by(*keys).having(total != 0).order_by(*keys)


def _code(stored: str) -> str | None:
    return stored or None  # '' is a count's key for a job with no code


class SqlCountReads:
    """The counting half of `SqlReads` (mixed in, over the same connection)."""

    conn: Connection

    def summarize_jobs(
        self,
        account: str | None,
        tool: str | None = None,
        since: datetime | None = None,
        until: datetime | None = None,
    ) -> JobSummary:
        query = _summed(Scope(account, tool, since, until), "status", "code", "tool", "account")
        rows = self.conn.execute(query)
        return JobSummary.from_groups((s, _code(c), t, a, int(n)) for s, c, t, a, n in rows)

    def count_statuses(
        self,
        account: str | None,
        tool: str | None = None,
        since: datetime | None = None,
        until: datetime | None = None,
    ) -> dict[str, int]:
        rows = self.conn.execute(_summed(Scope(account, tool, since, until), "status"))
        return {str(status): int(n) for status, n in rows}

    def count_jobs(self) -> list[JobCount]:
        rows = self.conn.execute(_summed(Scope(), "accepted", "status", "code", "tool"))
        return [JobCount(bool(a), s, _code(c), t, int(n)) for a, s, c, t, n in rows]

    def waiting_count(self) -> int:
        return self._waiting(Scope(statuses=_WAITING))

    def waiting_jobs(self, scope: str, account: str | None = None) -> int:
        kind, _, name = scope.partition(":")
        if kind == "turn":  # a turn's calls are its account's (counted by account, not turn)
            kind, name = "account", name.split("/")[0]
        if kind == "account" and account not in (None, name):
            return 0  # another account's brake holds none of this account's jobs
        return self._waiting(
            Scope(
                account=name if kind == "account" else account,
                tool=name if kind == "tool" else None,
                statuses=_WAITING,
            )
        )

    def _waiting(self, scope: Scope) -> int:
        groups = union_all(*_parts(scope)).subquery("counted")
        found = self.conn.execute(select(func.coalesce(func.sum(groups.c.jobs), 0))).scalar()
        return int(found or 0)

    def count_findings(self) -> list[FindingCount]:
        both = union_all(
            *(
                select(t.c.type, t.c.cause, t.c.events, t.c.last_at)
                for t in (finding_counts, finding_count_deltas)
            )
        ).subquery("found")
        query = (
            select(
                both.c.type,
                both.c.cause,
                func.sum(both.c.events).label("events"),
                func.max(both.c.last_at).label("last_at"),
            )
            .group_by(both.c.type, both.c.cause)
            .order_by(both.c.type, both.c.cause)
        )
        return [
            FindingCount(str(r.type), str(r.cause), int(r.events), utc(_as_time(r.last_at)))
            for r in self.conn.execute(query)
        ]


def _as_time(value: Any) -> datetime:
    # SQLite hands back max() over a union as the stored text, not as a datetime.
    return value if isinstance(value, datetime) else datetime.fromisoformat(str(value))


def compact(conn: Connection) -> int:
    """Fold the deltas into the totals (Postgres): how many delta rows, -1 when another fold
    was under way. SQLite keeps no deltas. `conn` is in autocommit: every few seconds it also
    vacuums the tables the folds empty (`sql_churn`), so what readers sum stays small."""
    if conn.dialect.name != "postgresql":
        return 0
    folded = int(conn.execute(_COMPACT).scalar_one())
    if sql_churn.due(conn.engine):
        sql_churn.vacuum_churn(conn)
    return folded


def recounting(conn: Connection) -> None:
    """For the rest of this transaction the triggers count nothing (Postgres): a rebuild
    rewrites every row and `recount`s them whole after."""
    if conn.dialect.name == "postgresql":
        conn.execute(_RECOUNTING)


def recount(conn: Connection) -> None:
    """Every count again from what `jobs` and `events` hold (a rebuild's last step; writers
    must be held off, as a rebuild holds them)."""
    if conn.dialect.name == "postgresql":
        conn.execute(_RECOUNT)
        return
    for table in (job_counts_hourly, job_counts, finding_counts):
        conn.execute(delete(table))
    # Whole seconds of the stored text: SQLite's time functions round to the millisecond.
    seconds = func.strftime("%s", func.substr(jobs.c.created_at, 1, 19))
    hour = (cast(seconds, Integer) / 3600).label("hour")
    keys = [*(jobs.c[c] for c in _COUNT_COLUMNS[:-1]), func.coalesce(jobs.c.code, "")]
    conn.execute(
        insert(job_counts_hourly).from_select(
            ["hour", *_COUNT_COLUMNS, "jobs"],
            select(hour, *keys, func.count()).group_by(hour, *keys),
        )
    )
    totals = [job_counts_hourly.c[c] for c in _COUNT_COLUMNS]
    conn.execute(
        insert(job_counts).from_select(
            [*_COUNT_COLUMNS, "jobs"],
            select(*totals, func.sum(job_counts_hourly.c.jobs)).group_by(*totals),
        )
    )
    cause = func.coalesce(
        func.nullif(func.json_extract(events.c.data, "$.error.cause"), ""),
        func.nullif(func.json_extract(events.c.data, "$.evidence"), ""),
        literal_column("'dispatch_deadline'"),
    ).label("cause")
    found = (
        select(events.c.type, cause, events.c.recorded_at)
        .where(events.c.actor == "reconciler", events.c.type.in_(sorted(FINDINGS)))
        .subquery("found")
    )
    conn.execute(
        insert(finding_counts).from_select(
            ["type", "cause", "events", "last_at"],
            select(
                found.c.type, found.c.cause, func.count(), func.max(found.c.recorded_at)
            ).group_by(found.c.type, found.c.cause),
        )
    )

"""The outbox's part of the contract in SQL (Postgres and SQLite): which job's message the
broker confirmed, each queue's epoch, the jobs whose wait the reconciler must judge, and the
backlog's figures (its waiting jobs are a kept count: `sql_counts.py`). Mixed into `SqlReads`
and `SqlWrites` over the same connection.

A job's start deadline and stream version live in its view (JSON): `->>` on Postgres,
json_extract on SQLite, where times compare as julian days.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

import psycopg
from sqlalchemy import (
    ColumnElement,
    Connection,
    DateTime,
    and_,
    bindparam,
    case,
    cast,
    delete,
    false,
    func,
    null,
    or_,
    select,
    union_all,
    update,
)
from sqlalchemy.dialects import postgresql, sqlite

from ledger.clock import format_time, utc
from ledger.codes import Status
from ledger.job_view import JobView
from ledger.persistence.schema import dispatches, events, jobs, leases, ledger_events, queue_epochs
from ledger.queueing import Confirmation, DispatchState, DispatchSummary
from ledger.reconcile_rules import OpenJob

_WAITING = [Status.QUEUED.value, Status.RETRYING.value]
_OPEN = jobs.c.terminal == false()
_VERSION = jobs.c.view["stream_version"].as_integer()
_START_BY = jobs.c.view["start_by"].as_string()
_UNCONFIRMED = or_(dispatches.c.job_id.is_(None), dispatches.c.version < _VERSION)
_WITH_DISPATCH = jobs.outerjoin(dispatches, dispatches.c.job_id == jobs.c.job_id)
_DISPATCH_COLUMNS = (
    dispatches.c.version.label("d_version"),
    dispatches.c.epoch.label("d_epoch"),
    dispatches.c.confirmed_at.label("d_confirmed_at"),
    dispatches.c.rejected.label("d_rejected"),
    dispatches.c.rejected_at.label("d_rejected_at"),
    dispatches.c.rejected_version.label("d_rejected_version"),
)
_STATE = select(*_DISPATCH_COLUMNS).where(dispatches.c.job_id == bindparam("job_id"))
_EPOCH = select(queue_epochs.c.epoch).where(queue_epochs.c.queue == bindparam("queue"))
_STARTS = select(func.count()).where(
    ledger_events.c.position > bindparam("after"),
    ledger_events.c.position <= bindparam("upto"),
    ledger_events.c.type == "work.started",
)


def _passed(conn: Connection, now: datetime) -> ColumnElement[bool]:
    """The view's `start_by` is before `now`."""
    if conn.dialect.name == "postgresql":
        return cast(_START_BY, DateTime(timezone=True)) < now
    return func.julianday(_START_BY) < func.julianday(format_time(now))


def _state(row: Any) -> DispatchState | None:
    if row.d_version is None:
        return None
    return DispatchState(
        version=row.d_version,
        epoch=row.d_epoch,
        confirmed_at=utc(row.d_confirmed_at),
        rejected=row.d_rejected,
        rejected_at=utc(row.d_rejected_at) if row.d_rejected_at is not None else None,
        rejected_version=row.d_rejected_version,
    )


class SqlOutboxReads:
    conn: Connection

    def dispatch_state(self, job_id: str) -> DispatchState | None:
        row = self.conn.execute(_STATE, {"job_id": job_id}).first()
        return _state(row) if row is not None else None

    def undispatched_jobs(self, before: datetime, limit: int) -> list[JobView]:
        query = (
            select(jobs.c.view)
            .select_from(_WITH_DISPATCH)
            .where(_OPEN, jobs.c.status.in_(_WAITING), jobs.c.updated_at < before, _UNCONFIRMED)
            .order_by(jobs.c.updated_at)
            .limit(limit)
        )
        return [JobView.model_validate(row.view) for row in self.conn.execute(query)]

    def queue_epoch(self, queue: str) -> str | None:
        found = self.conn.execute(_EPOCH, {"queue": queue}).scalar()
        return str(found) if found is not None else None

    def overdue_jobs(self, now: datetime, epoch: str | None) -> list[OpenJob]:
        waiting = jobs.c.status.in_(_WAITING)
        no_lease = cast(null(), leases.c.expires_at.type).label("expires_at")
        # A parked job's start_by is its approval's expiry (ledger.job_view).
        waits = jobs.c.status.in_([*_WAITING, Status.AWAITING_APPROVAL.value])
        late = (
            select(jobs.c.view, no_lease, *_DISPATCH_COLUMNS)
            .select_from(_WITH_DISPATCH)
            .where(_OPEN, waits, or_(_START_BY.is_(None), _passed(self.conn, now)))
        )
        lost_message: ColumnElement[bool] = and_(
            dispatches.c.rejected.is_not(None), dispatches.c.rejected_version >= _VERSION
        )
        if epoch is not None:
            moved = and_(dispatches.c.epoch.is_not(None), dispatches.c.epoch != epoch)
            lost_message = or_(lost_message, and_(moved, dispatches.c.version >= _VERSION))
        evidence = (
            select(jobs.c.view, no_lease, *_DISPATCH_COLUMNS)
            .select_from(dispatches.join(jobs, jobs.c.job_id == dispatches.c.job_id))
            .where(_OPEN, waiting, lost_message)
        )
        running = (
            select(jobs.c.view, leases.c.expires_at, *_DISPATCH_COLUMNS)
            .select_from(_WITH_DISPATCH.outerjoin(leases, leases.c.job_id == jobs.c.job_id))
            .where(
                _OPEN,
                jobs.c.status == Status.RUNNING.value,
                func.coalesce(leases.c.expires_at, jobs.c.lease_expires_at) < now,
            )
        )
        found: dict[str, OpenJob] = {}
        for row in self.conn.execute(union_all(late, evidence, running)):
            view = JobView.model_validate(row.view)
            expires = utc(row.expires_at) if row.expires_at is not None else None
            found.setdefault(view.job_id, OpenJob(view, expires, _state(row)))
        return list(found.values())

    def dispatch_summary(self) -> DispatchSummary:
        counts = select(
            func.count(),
            func.count().filter(_UNCONFIRMED),
            func.min(jobs.c.created_at),
        ).select_from(_WITH_DISPATCH)
        waiting, unconfirmed, oldest = self.conn.execute(
            counts.where(_OPEN, jobs.c.status.in_(_WAITING))
        ).one()
        evidence = events.c.data["evidence"].as_string().label("evidence")
        by_evidence = (
            select(evidence, func.count())
            .where(events.c.type == "job.redispatched")
            .group_by(evidence)
        )
        redispatched: dict[str, int] = {}
        for kind, count in self.conn.execute(by_evidence):
            key = kind or "timer"  # recorded before evidence was required
            redispatched[key] = redispatched.get(key, 0) + int(count)
        return DispatchSummary(
            waiting=int(waiting),
            unconfirmed=int(unconfirmed),
            oldest_waiting_since=utc(oldest) if oldest is not None else None,
            redispatched=redispatched,
        )

    def starts_between(self, after: int, upto: int) -> int:
        return int(self.conn.execute(_STARTS, {"after": after, "upto": upto}).scalar_one())


class SqlOutboxWrites:
    conn: Connection

    def record_dispatches(self, confirmed: Sequence[Confirmation]) -> None:
        newest: dict[str, Confirmation] = {}
        for item in confirmed:
            if item.job_id not in newest or newest[item.job_id].version <= item.version:
                newest[item.job_id] = item
        if not newest:
            return
        if self.conn.dialect.name == "postgresql":
            self._record_on_postgres(list(newest.values()))
            return
        waiting = select(jobs.c.job_id).where(
            jobs.c.job_id.in_(list(newest)), _OPEN, jobs.c.status.in_(_WAITING)
        )
        still = {row.job_id for row in self.conn.execute(waiting)}
        rows = [_row(c) for c in newest.values() if c.job_id in still]
        if rows:
            self.conn.execute(_sqlite_upsert(), rows)

    def _record_on_postgres(self, confirmed: list[Confirmation]) -> None:
        """One statement on the transaction's psycopg connection, for a whole flush: most of
        its jobs have started by then and are left out (a confirmation matters only while the
        job waits), so the table holds the waiting ones."""
        driver = self.conn.connection.driver_connection
        assert isinstance(driver, psycopg.Connection)
        # A confirmation lost with a crash costs one more publish (the relay's), never a job:
        # not worth waiting for the WAL's flush.
        driver.execute("SET LOCAL synchronous_commit = off")
        driver.execute(
            _PG_RECORD,
            (
                [c.job_id for c in confirmed],
                [c.version for c in confirmed],
                [c.epoch for c in confirmed],
                [c.confirmed_at for c in confirmed],
            ),
            prepare=True,
        )

    def reject_dispatch(self, job_id: str, version: int, reason: str, at: datetime) -> None:
        postgres = self.conn.dialect.name == "postgresql"
        stmt = (postgresql.insert if postgres else sqlite.insert)(dispatches)
        rejection = ("rejected", "rejected_at", "rejected_version")
        stmt = stmt.on_conflict_do_update(
            index_elements=[dispatches.c.job_id],
            set_={column: stmt.excluded[column] for column in rejection},
        )
        values = {
            "job_id": job_id,
            "version": 0,  # no confirmation recorded yet: any later one is of this wait or after
            "epoch": None,
            "confirmed_at": at,
            "rejected": reason[:500],
            "rejected_at": at,
            "rejected_version": version,
        }
        self.conn.execute(stmt, values)

    def set_queue_epoch(self, queue: str, expected: str | None, epoch: str, at: datetime) -> bool:
        if expected is None:
            postgres = self.conn.dialect.name == "postgresql"
            first = (postgresql.insert if postgres else sqlite.insert)(queue_epochs)
            stmt: Any = first.on_conflict_do_nothing(index_elements=[queue_epochs.c.queue])
            stmt = stmt.values(queue=queue, epoch=epoch, since=at)
        else:
            stmt = (
                update(queue_epochs)
                .where(queue_epochs.c.queue == queue, queue_epochs.c.epoch == expected)
                .values(epoch=epoch, since=at)
            )
        # RETURNING, not rowcount: drivers disagree on what an upsert that did nothing counts.
        return self.conn.execute(stmt.returning(queue_epochs.c.queue)).first() is not None

    def prune_dispatches(self, limit: int) -> int:
        done = (
            select(dispatches.c.job_id)
            .select_from(dispatches.outerjoin(jobs, jobs.c.job_id == dispatches.c.job_id))
            .where(or_(jobs.c.job_id.is_(None), jobs.c.terminal.is_(True)))
            .limit(limit)
        )
        result = self.conn.execute(delete(dispatches).where(dispatches.c.job_id.in_(done)))
        return int(result.rowcount or 0)


# The stored rejection stands unless this confirmation is of a later wait than it was about.
_PG_RECORD = """
INSERT INTO dispatches AS d (job_id, version, epoch, confirmed_at)
SELECT c.job_id, c.version, c.epoch, c.confirmed_at
  FROM unnest(%s::text[], %s::integer[], %s::text[], %s::timestamptz[])
       AS c(job_id, version, epoch, confirmed_at)
  JOIN jobs j ON j.job_id = c.job_id
 WHERE NOT j.terminal AND j.status IN ('queued', 'retrying')
ON CONFLICT (job_id) DO UPDATE SET
    version = EXCLUDED.version,
    epoch = EXCLUDED.epoch,
    confirmed_at = EXCLUDED.confirmed_at,
    rejected = CASE WHEN d.rejected_version < EXCLUDED.version THEN NULL ELSE d.rejected END,
    rejected_at = CASE WHEN d.rejected_version < EXCLUDED.version THEN NULL
                       ELSE d.rejected_at END,
    rejected_version = CASE WHEN d.rejected_version < EXCLUDED.version THEN NULL
                            ELSE d.rejected_version END
 WHERE d.version <= EXCLUDED.version
"""


def _row(c: Confirmation) -> dict[str, Any]:
    return {
        "job_id": c.job_id,
        "version": c.version,
        "epoch": c.epoch,
        "confirmed_at": c.confirmed_at,
        "rejected": None,
        "rejected_at": None,
        "rejected_version": None,
    }


def _sqlite_upsert() -> Any:
    stmt = sqlite.insert(dispatches)
    cleared = dispatches.c.rejected_version.is_(None) | (
        dispatches.c.rejected_version < stmt.excluded.version
    )
    return stmt.on_conflict_do_update(
        index_elements=[dispatches.c.job_id],
        set_={
            "version": stmt.excluded.version,
            "epoch": stmt.excluded.epoch,
            "confirmed_at": stmt.excluded.confirmed_at,
            "rejected": _kept(cleared, "rejected"),
            "rejected_at": _kept(cleared, "rejected_at"),
            "rejected_version": _kept(cleared, "rejected_version"),
        },
        where=dispatches.c.version <= stmt.excluded.version,
    )


def _kept(cleared: ColumnElement[bool], column: str) -> Any:
    """None where the stored rejection came before this confirmation (a rejection of an earlier
    message), else the stored rejection: it was made after this message was confirmed."""
    return case((cleared, null()), else_=dispatches.c[column])

"""The job reads of the contract in SQL (Postgres and SQLite): a job's view by id or key,
filtered pages, the reconciler's overdue jobs, quota windows and the console's silence (the
counts are kept: `sql_counts.py`). Queries
filter on the read model's indexed columns and hand back the views; account scoping happens
here, in SQL, so a page never carries another account's row."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from sqlalchemy import Connection, and_, bindparam, func, select

from ledger.clock import utc
from ledger.codes import Code
from ledger.job_view import JobView
from ledger.persistence.schema import jobs
from ledger.persistence.sql_rows import IN_CHUNK, JOB_CAUSE, job_scope
from ledger.queries import JobFilter, MissingOutcome

# Built once: constructing SQLAlchemy statements is a real cost on the hot path.
_JOB = select(jobs.c.view).where(jobs.c.job_id == bindparam("job_id"))
_JOBS_BY_ID = select(jobs.c.view).where(jobs.c.job_id.in_(bindparam("ids", expanding=True)))


class SqlJobReads:
    """The job half of `SqlReads` (which mixes it in, over the same connection)."""

    conn: Connection

    def job(self, job_id: str) -> JobView | None:
        row = self.conn.execute(_JOB, {"job_id": job_id}).first()
        return JobView.model_validate(row.view) if row else None

    def jobs_by_id(self, job_ids: Sequence[str]) -> dict[str, JobView]:
        found: dict[str, JobView] = {}
        for start in range(0, len(job_ids), IN_CHUNK):
            chunk = list(job_ids[start : start + IN_CHUNK])
            for row in self.conn.execute(_JOBS_BY_ID, {"ids": chunk}):
                view = JobView.model_validate(row.view)
                found[view.job_id] = view
        return found

    def jobs(self, where: JobFilter) -> list[JobView]:
        query = select(jobs.c.view).where(jobs.c.ledger_position > where.after)
        if where.before is not None:
            query = query.where(jobs.c.ledger_position < where.before)
        equal = {
            jobs.c.account: where.account,
            jobs.c.status: where.status,
            jobs.c.code: where.code,
            jobs.c.tool: where.tool,
            jobs.c.spends: where.spends,
        }
        query = query.where(
            *(column == value for column, value in equal.items() if value is not None)
        )
        if where.turn is not None:
            query = query.where(jobs.c.view["turn"].as_string() == where.turn)
        if where.since is not None:
            query = query.where(jobs.c.created_at >= where.since)
        if where.until is not None:
            query = query.where(jobs.c.created_at < where.until)
        order = jobs.c.ledger_position.desc() if where.newest_first else jobs.c.ledger_position
        query = query.order_by(order).limit(where.limit)
        return [JobView.model_validate(row.view) for row in self.conn.execute(query)]

    def job_by_idempotency_key(self, account: str, key: str) -> JobView | None:
        query = select(jobs.c.view).where(
            and_(jobs.c.account == account, jobs.c.idempotency_key == key)
        )
        row = self.conn.execute(query).first()
        return JobView.model_validate(row.view) if row else None

    def accepted_in_window(
        self, account: str, tool: str, since: datetime
    ) -> tuple[int, datetime | None]:
        query = select(func.count(), func.min(jobs.c.created_at)).where(
            and_(
                jobs.c.account == account,
                jobs.c.tool == tool,
                jobs.c.accepted.is_(True),
                jobs.c.created_at > since,
            )
        )
        count, oldest = self.conn.execute(query).one()
        return int(count), utc(oldest) if oldest is not None else None

    def job_positions(self, job_ids: Sequence[str]) -> dict[str, int]:
        found: dict[str, int] = {}
        for start in range(0, len(job_ids), IN_CHUNK):
            chunk = job_ids[start : start + IN_CHUNK]
            query = select(jobs.c.job_id, jobs.c.ledger_position).where(jobs.c.job_id.in_(chunk))
            found.update({row.job_id: int(row.ledger_position) for row in self.conn.execute(query)})
        return found

    def missing_outcomes(
        self, account: str | None, since: datetime, limit: int
    ) -> list[MissingOutcome]:
        # Three columns, not the view: a long window decodes no JSON document per job.
        query = (
            select(jobs.c.updated_at, JOB_CAUSE.label("cause"), jobs.c.spends)
            .where(
                *job_scope(account, None),
                jobs.c.code == Code.OUTCOME_MISSING.value,
                jobs.c.updated_at >= since,
            )
            .order_by(jobs.c.ledger_position.desc())
            .limit(limit)
        )
        return [
            MissingOutcome(utc(row.updated_at), row.cause, bool(row.spends))
            for row in self.conn.execute(query)
        ]

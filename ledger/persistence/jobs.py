"""Reading jobs from the read model."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import Connection, and_, func, select

from ledger.chain import utc
from ledger.job_view import JobView
from ledger.persistence.schema import jobs
from ledger.persistence.store import EventStore


def load_job(conn: Connection, job_id: str) -> JobView | None:
    row = conn.execute(select(jobs.c.view).where(jobs.c.job_id == job_id)).first()
    return JobView.model_validate(row.view) if row else None


def get_job(store: EventStore, job_id: str) -> JobView | None:
    with store.reading() as conn:
        return load_job(conn, job_id)


def find_by_idempotency_key(conn: Connection, account: str, key: str) -> JobView | None:
    query = select(jobs.c.view).where(
        and_(jobs.c.account == account, jobs.c.idempotency_key == key)
    )
    row = conn.execute(query).first()
    return JobView.model_validate(row.view) if row else None


def accepted_in_window(
    conn: Connection, account: str, tool: str, since: datetime
) -> tuple[int, datetime | None]:
    """How many jobs of this account and tool were accepted since `since`, and the oldest."""
    query = select(func.count(), func.min(jobs.c.created_at)).where(
        and_(
            jobs.c.account == account,
            jobs.c.tool == tool,
            jobs.c.accepted.is_(True),
            jobs.c.created_at > since,
        )
    )
    count, oldest = conn.execute(query).one()
    return int(count), utc(oldest) if oldest is not None else None


def list_jobs(
    store: EventStore, account: str | None = None, after: int = 0, limit: int = 100
) -> list[JobView]:
    query = select(jobs.c.view).where(jobs.c.ledger_position > after)
    if account is not None:
        query = query.where(jobs.c.account == account)
    query = query.order_by(jobs.c.ledger_position).limit(limit)
    with store.reading() as conn:
        return [JobView.model_validate(row.view) for row in conn.execute(query)]

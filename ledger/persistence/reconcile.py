"""The reconciler's runner: read overdue open jobs, record each finding once, dispatch.

The query touches only open jobs that are overdue (a partial index on open jobs), so a scan
costs what the open jobs cost, not what the ledger holds.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import UTC, datetime

from sqlalchemy import cast, false, func, null, select, union_all

from ledger.chain import utc
from ledger.codes import Status
from ledger.errors import AlreadyTerminalError, ConcurrencyError
from ledger.events import NewEvent, job_stream
from ledger.job_view import JobView
from ledger.persistence.schema import jobs, leases
from ledger.persistence.store import EventStore
from ledger.persistence.submit import Dispatcher, DispatchError
from ledger.persistence.work import drop_lease
from ledger.reconcile_rules import (
    Finding,
    OpenJob,
    ReconcilePolicy,
    dispatch_cutoff,
    findings,
)

log = logging.getLogger(__name__)
ACTOR = "reconciler"


@dataclass
class Pass:
    """What one reconcile pass did."""

    examined: int = 0
    recorded: list[str] = field(default_factory=list)  # "type job_id"
    lost_races: int = 0  # findings another reconciler (or a worker) recorded first
    dispatch_failures: int = 0


def overdue_jobs(store: EventStore, now: datetime, policy: ReconcilePolicy) -> list[OpenJob]:
    """One index range per open status (UNION ALL, not OR): each branch is a plain index scan
    on ix_jobs_open, which marks entries of dead row versions the first time it meets them,
    so closed jobs' leftovers cost one pass, not every pass until the next VACUUM."""
    cutoff = dispatch_cutoff(now, policy)
    still_open = jobs.c.terminal == false()
    no_lease = cast(null(), leases.c.expires_at.type).label("expires_at")
    queued = select(jobs.c.view, no_lease).where(
        still_open, jobs.c.status == Status.QUEUED.value, jobs.c.updated_at < cutoff
    )
    retrying = select(jobs.c.view, no_lease).where(
        still_open, jobs.c.status == Status.RETRYING.value, jobs.c.due_at < cutoff
    )
    running = (
        select(jobs.c.view, leases.c.expires_at)
        .select_from(jobs.outerjoin(leases, leases.c.job_id == jobs.c.job_id))
        .where(
            still_open,
            jobs.c.status == Status.RUNNING.value,
            func.coalesce(leases.c.expires_at, jobs.c.lease_expires_at) < now,
        )
    )
    query = union_all(queued, retrying, running)
    with store.reading() as conn:
        rows = conn.execute(query).all()
    return [
        OpenJob(
            JobView.model_validate(row.view),
            utc(row.expires_at) if row.expires_at is not None else None,
        )
        for row in rows
    ]


def reconcile_once(
    store: EventStore,
    dispatcher: Dispatcher | None,
    policy: ReconcilePolicy,
    now: datetime | None = None,
) -> Pass:
    now = now or datetime.now(UTC)
    candidates = overdue_jobs(store, now, policy)
    result = Pass(examined=len(candidates))
    for finding in findings(candidates, now, policy):
        if _record(store, finding):
            result.recorded.append(f"{finding.payload.type} {finding.job_id}")
            if finding.dispatch and dispatcher is not None:
                _dispatch(dispatcher, finding.job_id, result)
        else:
            result.lost_races += 1
    return result


def _record(store: EventStore, finding: Finding) -> bool:
    event = NewEvent(payload=finding.payload, actor=ACTOR)
    attempt = getattr(finding.payload, "attempt", 0)
    try:
        with store.transaction() as tx:
            tx.append(job_stream(finding.job_id), [event], finding.after_version)
            # The silent attempt is over either way: its lease must not outlive it.
            drop_lease(tx.conn, finding.job_id, attempt)
    except (ConcurrencyError, AlreadyTerminalError):
        return False  # the job moved since we looked: someone else settled it
    return True


def _dispatch(dispatcher: Dispatcher, job_id: str, result: Pass) -> None:
    try:
        dispatcher.dispatch(job_id)
    except DispatchError as exc:
        result.dispatch_failures += 1
        log.warning("re-dispatch of job %s failed (%s); the next pass will try again", job_id, exc)

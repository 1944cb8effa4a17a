"""Whether a ledger bench.reconcile filled (or churned) is consistent: its counts against the
plan, its hash chains, and its jobs read model against a fresh fold of the events."""

from __future__ import annotations

import random
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import func, select

from bench._store import (
    EVENT_COLUMNS,
    SqlStore,
    ViewProjection,
    events,
    jobs,
    leases,
    row_to_event,
)
from bench.reconcile_history import jobs_projection
from bench.reconcile_plan import Plan
from ledger.chain import VerifyReport, stream_links
from ledger.events import RecordedEvent, job_stream
from ledger.job_view import JobView
from ledger.runtime.ledger import Ledger
from ledger.services.audit import verify

SAMPLE_STREAMS = 500  # job streams verified on the large ledger (plus every open one)


@dataclass
class Check:
    """What filling produced, and whether it is a consistent ledger."""

    events: int = 0
    jobs: int = 0
    open_jobs: int = 0
    leases: int = 0
    streams_verified: int = 0
    events_verified: int = 0
    problems: list[str] = field(default_factory=list)
    fill_s: float = 0.0

    def expect(self, what: str, got: int, want: int) -> None:
        if got != want:
            self.problems.append(f"{what}: {got}, expected {want}")


def check_counts(store: SqlStore, plan: Plan, check: Check) -> None:
    with store.connection() as conn:

        def count(query: Any) -> int:
            return int(conn.execute(query).scalar_one())

        check.events = count(select(func.count()).select_from(events))
        check.jobs = count(select(func.count()).select_from(jobs))
        check.open_jobs = count(select(func.count()).select_from(jobs).where(~jobs.c.terminal))
        check.leases = count(select(func.count()).select_from(leases))
        last = count(select(func.max(events.c.position)))
        by_status = {
            row.status: int(row.n)
            for row in conn.execute(
                select(jobs.c.status, func.count().label("n")).group_by(jobs.c.status)
            )
        }
    check.expect("events", check.events, plan.events)
    check.expect("last position", last, plan.events)
    check.expect("jobs", check.jobs, plan.jobs)
    check.expect("open jobs", check.open_jobs, plan.open_jobs)
    check.expect("leases", check.leases, plan.running)
    check.expect("queued", by_status.get("queued", 0), plan.queued)
    check.expect("running", by_status.get("running", 0), plan.running)
    check.expect("succeeded", by_status.get("succeeded", 0), plan.closed_jobs)
    check.expect("refused", by_status.get("refused", 0), plan.refused_jobs)


def stream_events(store: SqlStore, job_ids: Sequence[str]) -> list[RecordedEvent]:
    """The events of these jobs' streams, in position order."""
    streams = [job_stream(j) for j in job_ids]
    query = select(*EVENT_COLUMNS).where(events.c.stream_id.in_(streams))
    with store.connection() as conn:
        return [row_to_event(row) for row in conn.execute(query.order_by(events.c.position))]


def check_streams(store: SqlStore, job_ids: Sequence[str] | None, check: Check) -> None:
    """Hash chains of these job streams (None: the whole ledger, by the auditors' `verify`,
    the ledger-wide chain included), and their read-model rows against a fresh fold of their
    events."""
    projection = jobs_projection(store)
    recorded: Iterable[RecordedEvent]
    if job_ids is None:
        report = verify(Ledger(store))
        recorded = store.iter_events()
    else:
        recorded = stream_events(store, job_ids)
        report = stream_chains(recorded)
    check.events_verified, check.streams_verified = report.events_checked, report.streams_checked
    check.problems.extend(p.message for p in report.problems[:5])
    folded: dict[str, Any] = {}
    for event in recorded:
        if projection.handles(event.type):
            key = projection.key(event)
            folded[key] = projection.fold(folded.get(key), event)
    query = select(*jobs.c)
    if job_ids is not None:
        query = query.where(jobs.c.job_id.in_(list(job_ids)))
    with store.connection() as conn:
        stored = {row.job_id: row._asdict() for row in conn.execute(query)}
    check.expect("read-model rows checked", len(stored), len(folded))
    mismatched = [k for k, view in folded.items() if not same_row(projection, view, stored.get(k))]
    check.expect("read-model rows differing from a fold of their events", len(mismatched), 0)


def stream_chains(recorded: Sequence[RecordedEvent]) -> VerifyReport:
    """Each sampled stream's own chain (`stream_links`); the ledger-wide link needs every
    position's neighbour, so only the whole ledger's `verify` checks it."""
    streams: dict[str, list[RecordedEvent]] = {}
    for event in recorded:
        streams.setdefault(event.stream_id, []).append(event)
    report = VerifyReport(events_checked=len(recorded), streams_checked=len(streams))
    for stream in streams.values():
        for _, problems in stream_links(stream):
            report.problems.extend(problems)
    return report


def same_row(projection: ViewProjection[Any], view: JobView, stored: dict[str, Any] | None) -> bool:
    if stored is None:
        return False
    want = projection.row(view.job_id, view)
    if JobView.model_validate(stored["view"]) != view:
        return False
    return all(stored[k] == v for k, v in want.items() if k != "view")


def sample_job_ids(store: SqlStore, size: int) -> list[str]:
    with store.connection() as conn:
        closed = [r[0] for r in conn.execute(select(jobs.c.job_id).where(jobs.c.terminal))]
        still_open = [r[0] for r in conn.execute(select(jobs.c.job_id).where(~jobs.c.terminal))]
    return random.sample(closed, min(size, len(closed))) + still_open

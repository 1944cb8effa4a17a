"""Reconcile benchmark: one scan with 1,000 open jobs, in a ledger of 10k events and of 1M events.

Run:  cd /work/main && .venv/bin/python -m bench.reconcile [--small 10000] [--large 1000000]
                          [--open 1000] [--running 500] [--reps 50] [--explain] [--json]
                          [--verify-large] [--no-churn]

Two scratch Postgres databases, ledger A (--small) and ledger B (--large), named
`outcomes_bench_reconcile_{small,large}_<pid>` (admin URL from
OUTCOMES_BENCH_PG_ADMIN, default postgres@127.0.0.1:5432) are created, migrated to head, filled,
and dropped at the end, on error and SIGTERM too. Each ledger holds exactly `--open` open jobs
(`--running` of them running with a valid lease, the others queued) among closed jobs, so that
the two ledgers differ only in how much closed history they carry.

Filling. The closed history (job.accepted -> work.started -> work.succeeded per job; one
job.refused per leftover event so that the event count is exact) is built with the store's own
code: payloads dumped and normalized as `Transaction.append` does, the per-stream hash chain by
`ledger.chain.event_hash`, the job read model folded by `ledger.job_view.evolve` and shaped by
the jobs `ViewProjection.row`; it is bulk-loaded with COPY, the position sequence is moved past
it, and then the open jobs go through the real `submit` (and `claim` for the running ones).
Ledger A is then verified in full (`verify_ledger` and a rebuild of the jobs read model compared
row by row); ledger B by counts and the same two checks on a random sample of job streams (all
of it with --verify-large). Both get VACUUM (ANALYZE), the state autovacuum leaves a ledger in.

Measured, `--reps` times per ledger after a warm-up, A and B interleaved to cancel drift, first
on the vacuumed ledgers:

- steady    `reconcile_once(store, None, policy, now)` where nothing is overdue (the common
            case: the scan finds nothing, appends nothing).
- overdue   `overdue_jobs(store, now, policy)` + `findings(...)` at a `now` where all open jobs
            are overdue (every one yields a finding); nothing is appended, so it repeats.
- overdue_sql  the SQL statement `overdue_jobs` sends, run on the same pool and fetched, without
            building views (to tell the database's share from Python's).

then (unless --no-churn) after `churn`: the jobs closed since autovacuum last ran leave dead row
versions, and their entries in ix_jobs_open, until a VACUUM removes them; each ledger gets as
many as make autovacuum's default trigger fire on its jobs table (20% of its rows), the worst
moment of a live ledger's steady state, and the same two scans are measured again:

- steady_churned, overdue_churned   as steady and overdue.

Goals (issue 4), on the median of each scan: B / A <= 1.5 and B <= 50 ms. The script reports
whether they were met and exits 0 either way: speed is measured here, not asserted.
--explain prints EXPLAIN (ANALYZE, BUFFERS) of the scan query on B (vacuumed at both clocks;
churned at the steady clock) and whether it uses the open-jobs partial index (ix_jobs_open)
rather than scanning the jobs table.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import orjson
import psycopg
from pydantic import BaseModel
from sqlalchemy import Engine, event, func, select, text

from bench._common import (
    exit_cleanly_on_sigterm,
    libpq_url,
    render_table,
    scratch_database,
    sqlalchemy_url,
)
from ledger.chain import ChainLink, event_hash, normalize_data, verify_chain
from ledger.codes import Code
from ledger.decisions import Caller, JobRequest
from ledger.error_info import ErrorInfo
from ledger.events import (
    JobAccepted,
    JobRefused,
    Payload,
    RecordedEvent,
    WorkStarted,
    WorkSucceeded,
    job_stream,
)
from ledger.job_view import JobView, evolve
from ledger.outcomes import Succeeded
from ledger.persistence.audit import verify_ledger
from ledger.persistence.migrate import upgrade
from ledger.persistence.open import open_store
from ledger.persistence.projections import ViewProjection
from ledger.persistence.reconcile import overdue_jobs, reconcile_once
from ledger.persistence.schema import events, jobs, leases
from ledger.persistence.store import EventStore, row_to_event, row_to_link
from ledger.persistence.submit import submit
from ledger.persistence.work import ClaimResult, claim
from ledger.reconcile_rules import ReconcilePolicy, findings
from ledger.tools import ToolContext, ToolSpec, get_tool, tool

GOAL_RATIO = 1.5
GOAL_LARGE_MS = 50.0
WARMUP = 5
# Generous on purpose: the steady clock is the end of filling, and nothing may be overdue then
# however long the open jobs took to create. The scan's query is the same whatever the values.
POLICY = ReconcilePolicy(dispatch_timeout_s=600.0, max_dispatches=3)
LEASE_S = 600.0
OVERDUE_AFTER = timedelta(days=1)  # a clock at which every open job is overdue
STEP = timedelta(milliseconds=1)  # spacing of the closed history's recorded_at
HISTORY_GAP = timedelta(hours=1)  # the closed history ends this long before the open jobs
WINDOW = 100  # closed jobs in flight together: their events interleave like a busy ledger's
CHUNK = 5000  # closed jobs per COPY batch
SAMPLE_STREAMS = 500  # job streams verified on the large ledger (plus every open one)
ACCOUNTS = tuple(f"acct-{i}" for i in range(10))
SMALL, LARGE = "small", "large"
STEADY, OVERDUE, OVERDUE_SQL = "steady", "overdue", "overdue_sql"
STEADY_CHURNED, OVERDUE_CHURNED = "steady_churned", "overdue_churned"
VACUUMED_SCANS = (STEADY, OVERDUE, OVERDUE_SQL)
CHURNED_SCANS = (STEADY_CHURNED, OVERDUE_CHURNED)
GOAL_SCANS = (STEADY, OVERDUE, STEADY_CHURNED, OVERDUE_CHURNED)

READS, SPENDS = "bench.reconcile_reads", "bench.reconcile_spends"


class RefArgs(BaseModel):
    ref: str


@tool(READS, spends=False, timeout_s=30, max_attempts=3)
def _reads(args: RefArgs, ctx: ToolContext) -> Succeeded:
    return Succeeded({"ref": args.ref})


@tool(SPENDS, spends=True, timeout_s=60)
def _spends(args: RefArgs, ctx: ToolContext) -> Succeeded:
    return Succeeded({"ref": args.ref})


def spec_of(name: str) -> ToolSpec:
    spec = get_tool(name)
    assert spec is not None
    return spec


@dataclass(frozen=True)
class Options:
    small: int
    large: int
    open_jobs: int
    running: int
    reps: int
    explain: bool
    as_json: bool
    verify_large: bool
    churn: bool


def parse_options(argv: Sequence[str] | None) -> Options:
    parser = argparse.ArgumentParser(
        prog="python -m bench.reconcile", description=__doc__.splitlines()[0] if __doc__ else None
    )
    parser.add_argument("--small", type=int, default=10_000, help="events in ledger A")
    parser.add_argument("--large", type=int, default=1_000_000, help="events in ledger B")
    parser.add_argument("--open", type=int, default=1000, help="open jobs in each ledger")
    parser.add_argument("--running", type=int, default=500, help="of them, running (leased)")
    parser.add_argument("--reps", type=int, default=50, help="timed scans per ledger and kind")
    parser.add_argument("--explain", action="store_true", help="EXPLAIN ANALYZE the scan on B")
    parser.add_argument("--json", action="store_true", help="print one JSON line, no table")
    parser.add_argument(
        "--verify-large", action="store_true", help="verify all of B, not a sample (slow)"
    )
    parser.add_argument(
        "--no-churn", action="store_true", help="skip the scans after churn (see `churn`)"
    )
    args = parser.parse_args(argv)
    if args.reps < 1 or args.open < 1 or not 0 <= args.running <= args.open:
        parser.error("--reps and --open must be at least 1, and 0 <= --running <= --open")
    options = Options(
        args.small,
        args.large,
        args.open,
        args.running,
        args.reps,
        args.explain,
        args.json,
        args.verify_large,
        not args.no_churn,
    )
    for size in (options.small, options.large):
        if size < Plan(size, options.open_jobs, options.running).open_events:
            parser.error(f"a ledger of {size} events cannot hold {options.open_jobs} open jobs")
    return options


@dataclass(frozen=True)
class Plan:
    """What one ledger holds: `events` events in all, `open_jobs` of its jobs still open."""

    events: int
    open_jobs: int
    running: int

    @property
    def queued(self) -> int:
        return self.open_jobs - self.running

    @property
    def open_events(self) -> int:
        return self.queued + 2 * self.running  # accepted (+ started)

    @property
    def closed_jobs(self) -> int:
        return (self.events - self.open_events) // 3  # accepted, started, succeeded

    @property
    def refused_jobs(self) -> int:
        return (self.events - self.open_events) % 3  # one event each: the count is exact

    @property
    def jobs(self) -> int:
        return self.closed_jobs + self.refused_jobs + self.open_jobs


# --- the closed history, built with the store's code and bulk-loaded --------------------------

EVENT_COLUMNS = tuple(c.name for c in events.columns)
JOB_COLUMNS = tuple(c.name for c in jobs.columns)
EventRow = tuple[Any, ...]
JobRow = tuple[Any, ...]


def jobs_projection(store: EventStore) -> ViewProjection[Any]:
    for projection in store.projections:
        if isinstance(projection, ViewProjection) and projection.table is jobs:
            return projection
    raise RuntimeError("the store has no jobs projection")


@dataclass
class Stream:
    """A job stream being written: its head and its folded view."""

    stream_id: str
    version: int = 0
    prev_hash: str | None = None
    view: JobView | None = None


class History:
    """Events as `Transaction.append` records them, numbered and clocked by hand."""

    def __init__(self, start: datetime) -> None:
        self.position = 0
        self.clock = start
        self.pending: list[RecordedEvent] = []  # recorded since the last `drain`

    def drain(self) -> list[RecordedEvent]:
        drained, self.pending = self.pending, []
        return drained

    def record(self, stream: Stream, payload: Payload, actor: str) -> RecordedEvent:
        self.position += 1
        self.clock += STEP
        event_id = uuid.uuid4()
        fields: dict[str, Any] = {
            "stream_id": stream.stream_id,
            "stream_version": stream.version + 1,
            "event_id": event_id,
            "type": payload.type,
            "data": normalize_data(payload.model_dump(mode="json")),
            "code": payload.code.value if payload.code else None,
            "actor": actor,
            "recorded_at": self.clock,
            "prev_hash": stream.prev_hash,
        }
        fields["hash"] = event_hash(**(fields | {"event_id": str(event_id)}))
        recorded = RecordedEvent(position=self.position, **fields)
        stream.version, stream.prev_hash = recorded.stream_version, recorded.hash
        stream.view = evolve(stream.view, recorded)
        self.pending.append(recorded)
        return recorded


def event_row(recorded: RecordedEvent) -> EventRow:
    return (
        recorded.position,
        recorded.stream_id,
        recorded.stream_version,
        recorded.event_id,
        recorded.type,
        orjson.dumps(recorded.data).decode(),
        recorded.code.value if recorded.code else None,
        recorded.actor,
        recorded.recorded_at,
        recorded.prev_hash,
        recorded.hash,
    )


def job_row(projection: ViewProjection[Any], view: JobView) -> JobRow:
    values = projection.row(view.job_id, view)
    values["view"] = orjson.dumps(values["view"]).decode()
    return tuple(values[name] for name in JOB_COLUMNS)


def request_for(number: int) -> tuple[Caller, JobRequest, ToolSpec]:
    """The number-th job's caller and request (reads and spends alternate)."""
    name = READS if number % 2 == 0 else SPENDS
    caller = Caller(account=ACCOUNTS[number % len(ACCOUNTS)], token_id=f"token-{number % 7}")
    request = JobRequest(name, {"ref": f"R-{number}"}, idempotency_key=uuid.uuid4().hex)
    return caller, request, spec_of(name)


def accepted(number: int) -> tuple[JobAccepted, str]:
    caller, request, spec = request_for(number)
    payload = JobAccepted(
        account=caller.account,
        tool=request.tool,
        args=request.args,
        idempotency_key=request.idempotency_key,
        request_hash=request.fingerprint,
        spends=spec.spends,
        timeout_s=spec.timeout_s,
        max_attempts=spec.max_attempts,
    )
    return payload, caller.token_id


def refused(number: int) -> tuple[JobRefused, str]:
    caller, request, spec = request_for(number)
    error = ErrorInfo(
        code=Code.INPUT_INVALID,
        dependency=request.tool,
        operation="validate the arguments",
        fix="correct the arguments to match the tool's schema",
        message="The arguments do not match the tool's schema (ref: too long).",
    )
    payload = JobRefused(
        account=caller.account,
        tool=request.tool,
        args=request.args,
        idempotency_key=request.idempotency_key,
        request_hash=request.fingerprint,
        spends=spec.spends,
        error=error,
    )
    return payload, caller.token_id


def closed_window(history: History, first: int, count: int) -> list[Stream]:
    """`count` jobs run side by side: all accepted, then all started, then all succeeded."""
    streams = [Stream(job_stream(uuid.uuid4())) for _ in range(count)]
    for offset, stream in enumerate(streams):
        payload, actor = accepted(first + offset)
        history.record(stream, payload, actor)
    for offset, stream in enumerate(streams):
        worker = f"worker-{(first + offset) % 16}"
        lease = history.clock + timedelta(seconds=30)
        history.record(
            stream, WorkStarted(attempt=1, worker=worker, lease_expires_at=lease), worker
        )
    for offset, stream in enumerate(streams):
        worker = f"worker-{(first + offset) % 16}"
        result = {"ref": f"R-{first + offset}", "ok": True}
        history.record(stream, WorkSucceeded(attempt=1, result=result), worker)
    return streams


def closed_history(
    plan: Plan, projection: ViewProjection[Any], start: datetime
) -> Iterator[tuple[list[EventRow], list[JobRow]]]:
    """The closed history in COPY batches of (event rows, job rows), in position order."""
    history = History(start)
    event_rows: list[EventRow] = []
    job_rows: list[JobRow] = []

    def take(streams: list[Stream]) -> None:
        event_rows.extend(event_row(r) for r in history.drain())
        for stream in streams:
            assert stream.view is not None
            job_rows.append(job_row(projection, stream.view))

    for number in range(plan.refused_jobs):
        stream = Stream(job_stream(uuid.uuid4()))
        payload, actor = refused(number)
        history.record(stream, payload, actor)
        take([stream])
    number = plan.refused_jobs
    end = plan.refused_jobs + plan.closed_jobs
    while number < end:
        count = min(WINDOW, end - number)
        take(closed_window(history, number, count))
        number += count
        if len(job_rows) >= CHUNK:
            yield event_rows, job_rows
            event_rows, job_rows = [], []
    if event_rows:
        yield event_rows, job_rows


def copy_rows(
    conn: psycopg.Connection[Any], table: str, columns: Sequence[str], rows: Sequence[EventRow]
) -> None:
    names = ", ".join(columns)
    with conn.cursor() as cur, cur.copy(f"COPY {table} ({names}) FROM STDIN") as copy:
        for row in rows:
            copy.write_row(row)


def load_closed(url: str, plan: Plan, projection: ViewProjection[Any]) -> int:
    """COPY the closed history in one transaction; move the position sequence past it."""
    start = datetime.now(UTC) - STEP * (plan.events + 1) - HISTORY_GAP
    last = 0
    with psycopg.connect(libpq_url(url)) as conn:
        for event_rows, job_rows in closed_history(plan, projection, start):
            copy_rows(conn, "events", EVENT_COLUMNS, event_rows)
            copy_rows(conn, "jobs", JOB_COLUMNS, job_rows)
            last = event_rows[-1][0]
        if last:
            conn.execute("SELECT setval(pg_get_serial_sequence('events', 'position'), %s)", (last,))
        conn.commit()
    return last


def open_jobs(store: EventStore, plan: Plan) -> None:
    """The open jobs, through the real submit path (and claim, for the running ones)."""
    for number in range(plan.open_jobs):
        caller, request, _ = request_for(10_000_000 + number)
        view = submit(store, caller, request).view
        if not view.accepted:
            raise RuntimeError(f"bench job refused: {view.error}")
        if number < plan.running:
            claimed = claim(store, view.job_id, f"worker-{number % 16}", LEASE_S)
            if claimed.result is not ClaimResult.CLAIMED:
                raise RuntimeError(f"bench job not claimed: {claimed.reason}")


# --- verification ------------------------------------------------------------------------------


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


def check_counts(store: EventStore, plan: Plan, check: Check) -> None:
    with store.reading() as conn:

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


def check_streams(store: EventStore, job_ids: Sequence[str] | None, check: Check) -> None:
    """Hash chains of these job streams (None: the whole ledger, by `verify_ledger`), and their
    read-model rows against a fresh fold of their events."""
    projection = jobs_projection(store)
    if job_ids is None:
        report = verify_ledger(store)
        links_by_stream = None
    else:
        streams = [job_stream(j) for j in job_ids]
        query = select(*events.c).where(events.c.stream_id.in_(streams)).order_by(events.c.position)
        with store.reading() as conn:
            rows = conn.execute(query).all()
        links_by_stream = [row_to_link(r) for r in rows]
        report = verify_chain(links_by_stream)
    check.events_verified, check.streams_verified = report.events_checked, report.streams_checked
    check.problems.extend(p.message for p in report.problems[:5])
    folded: dict[str, Any] = {}
    source = store.iter_events() if links_by_stream is None else map(link_event, links_by_stream)
    for recorded in source:
        if projection.handles(recorded.type):
            projection.fold_into(folded, recorded)
    query = select(*jobs.c)
    if job_ids is not None:
        query = query.where(jobs.c.job_id.in_(list(job_ids)))
    with store.reading() as conn:
        stored = {row.job_id: row._asdict() for row in conn.execute(query)}
    check.expect("read-model rows checked", len(stored), len(folded))
    mismatched = [k for k, view in folded.items() if not same_row(projection, view, stored.get(k))]
    check.expect("read-model rows differing from a fold of their events", len(mismatched), 0)


def link_event(link: ChainLink) -> RecordedEvent:
    return RecordedEvent(
        position=link.position,
        stream_id=link.stream_id,
        stream_version=link.stream_version,
        event_id=uuid.UUID(link.event_id),
        type=link.type,
        data=dict(link.data),
        code=link.code,
        actor=link.actor,
        recorded_at=link.recorded_at,
        prev_hash=link.prev_hash,
        hash=link.hash,
    )


def same_row(projection: ViewProjection[Any], view: JobView, stored: dict[str, Any] | None) -> bool:
    if stored is None:
        return False
    want = projection.row(view.job_id, view)
    if JobView.model_validate(stored["view"]) != view:
        return False
    return all(stored[k] == v for k, v in want.items() if k != "view")


def sample_job_ids(store: EventStore, size: int) -> list[str]:
    with store.reading() as conn:
        closed = [r[0] for r in conn.execute(select(jobs.c.job_id).where(jobs.c.terminal))]
        still_open = [r[0] for r in conn.execute(select(jobs.c.job_id).where(~jobs.c.terminal))]
    return random.sample(closed, min(size, len(closed))) + still_open


def vacuum_analyze(url: str) -> None:
    with psycopg.connect(libpq_url(url), autocommit=True) as conn:
        conn.execute("VACUUM (ANALYZE) events, jobs, leases")


# --- ledgers -----------------------------------------------------------------------------------


@dataclass
class Ledger:
    name: str
    plan: Plan
    store: EventStore
    check: Check
    steady_now: datetime = field(default_factory=lambda: datetime.now(UTC))
    url: str = ""
    churned: int = 0  # closed jobs whose dead row versions `churn` left in `jobs`


def build_ledger(name: str, url: str, plan: Plan, verify_all: bool) -> Ledger:
    started = time.perf_counter()
    store = open_store(sqlalchemy_url(url))
    upgrade(store.engine)
    load_closed(url, plan, jobs_projection(store))
    opening = datetime.now(UTC)
    open_jobs(store, plan)
    steady_now = datetime.now(UTC)
    if steady_now - opening >= timedelta(seconds=min(LEASE_S, POLICY.dispatch_timeout_s)):
        raise RuntimeError("creating the open jobs took longer than the lease: raise LEASE_S")
    check = Check()
    check_counts(store, plan, check)
    check_streams(store, None if verify_all else sample_job_ids(store, SAMPLE_STREAMS), check)
    vacuum_analyze(url)
    check.fill_s = time.perf_counter() - started
    if check.problems:
        raise RuntimeError(f"ledger {name} is not consistent: {'; '.join(check.problems)}")
    return Ledger(name, plan, store, check, steady_now, url)


@contextmanager
def ledgers(options: Options) -> Iterator[dict[str, Ledger]]:
    with ExitStack() as stack:
        built: dict[str, Ledger] = {}
        for name, size in ((SMALL, options.small), (LARGE, options.large)):
            url = stack.enter_context(scratch_database(f"outcomes_bench_reconcile_{name}"))
            plan = Plan(size, options.open_jobs, options.running)
            ledger = build_ledger(name, url, plan, verify_all=name == SMALL or options.verify_large)
            stack.callback(ledger.store.engine.dispose)
            built[name] = ledger
        yield built


# --- churn: jobs closed since autovacuum last ran on the jobs table ----------------------------

DEAD_PER_JOB = 2  # a job's row is inserted queued, then updated running, then updated closed


def churn_size(conn: psycopg.Connection[Any], ledger: Ledger) -> int:
    """Closed jobs whose dead row versions make autovacuum's default trigger fire on `jobs`."""
    threshold = int(str(conn.execute("SHOW autovacuum_vacuum_threshold").fetchall()[0][0]))
    scale = float(str(conn.execute("SHOW autovacuum_vacuum_scale_factor").fetchall()[0][0]))
    dead = threshold + scale * ledger.check.jobs
    return min(ledger.plan.closed_jobs, int(dead) // DEAD_PER_JOB)


def stage_rows(ledger: Ledger, job_ids: Sequence[str]) -> list[list[JobRow]]:
    """Each job's read-model row after each of its events, as the projection wrote them."""
    projection = jobs_projection(ledger.store)
    stages: list[list[JobRow]] = [[], [], []]
    for start in range(0, len(job_ids), CHUNK):
        streams = [job_stream(j) for j in job_ids[start : start + CHUNK]]
        query = select(*events.c).where(events.c.stream_id.in_(streams)).order_by(events.c.position)
        views: dict[str, JobView] = {}
        with ledger.store.reading() as conn:
            for row in conn.execute(query):
                recorded = row_to_event(row)
                view = evolve(views.get(recorded.stream_id), recorded)
                views[recorded.stream_id] = view
                stages[recorded.stream_version - 1].append(job_row(projection, view))
    return stages


def churn(ledger: Ledger, url: str) -> int:
    """Leave in `jobs` what the jobs closed since the last autovacuum leave there: their dead row
    versions, and their entries in the indexes (ix_jobs_open: one queued, one running per job).

    The most recently closed jobs' rows are rewritten through the row versions the projection
    wrote when they ran (queued, running, closed; each stage one UPDATE per row, in its own
    transaction), ending where they were. As many jobs as make autovacuum's default trigger
    (threshold + scale factor x rows) fire: the worst moment of the steady state. Autovacuum is
    turned off on this scratch `jobs` table so that it cannot clean up in the middle of the
    measurement. The events are untouched; the rows end identical (checked on a sample)."""
    with psycopg.connect(libpq_url(url), autocommit=True) as conn:
        count = churn_size(conn, ledger)
        conn.execute("ALTER TABLE jobs SET (autovacuum_enabled = false)")
        job_ids = [
            str(r[0])
            for r in conn.execute(
                "SELECT job_id FROM jobs WHERE status = 'succeeded'"
                " ORDER BY ledger_position DESC LIMIT %s",
                (count,),
            )
        ]
    stages = stage_rows(ledger, job_ids)
    if any(len(stage) != len(job_ids) for stage in stages):
        raise RuntimeError(f"{ledger.name}: churned jobs without three events")
    columns = [c for c in JOB_COLUMNS if c != "job_id"]
    assign = ", ".join(columns)
    update = (
        f"UPDATE jobs SET ({assign}) = ({', '.join('s.' + c for c in columns)})"
        " FROM bench_stage s WHERE jobs.job_id = s.job_id"
    )
    with psycopg.connect(libpq_url(url)) as conn:
        conn.execute("CREATE TEMP TABLE bench_stage (LIKE jobs)")
        for stage in stages:
            copy_rows(conn, "bench_stage", JOB_COLUMNS, stage)
            updated = conn.execute(update).rowcount
            conn.execute("TRUNCATE bench_stage")
            conn.commit()
            if updated != len(job_ids):
                raise RuntimeError(f"{ledger.name}: churn updated {updated} of {len(job_ids)}")
    # Checked by primary key only: a plain index scan of ix_jobs_open (a count of the open jobs,
    # say) would mark the dead entries it meets as dead, and undo what this set up.
    check = Check()
    check_streams(ledger.store, random.sample(job_ids, min(SAMPLE_STREAMS, len(job_ids))), check)
    if check.problems:
        raise RuntimeError(f"ledger {ledger.name} after churn: {'; '.join(check.problems)}")
    ledger.churned = len(job_ids)
    return len(job_ids)


# --- the scans -----------------------------------------------------------------------------------


@contextmanager
def captured_statements(engine: Engine) -> Iterator[list[tuple[str, Any]]]:
    seen: list[tuple[str, Any]] = []

    def listener(
        conn: Any, cursor: Any, statement: str, parameters: Any, context: Any, many: bool
    ) -> None:
        seen.append((statement, parameters))

    event.listen(engine, "before_cursor_execute", listener)
    try:
        yield seen
    finally:
        event.remove(engine, "before_cursor_execute", listener)


def scan_statement(ledger: Ledger, now: datetime) -> tuple[str, Any]:
    """The SQL that `overdue_jobs` sends, with its parameters."""
    with captured_statements(ledger.store.engine) as seen:
        overdue_jobs(ledger.store, now, POLICY)
    selects = [s for s in seen if s[0].lstrip().upper().startswith("SELECT")]
    if len(selects) != 1:
        raise RuntimeError(f"overdue_jobs sent {len(selects)} SELECTs, expected one")
    return selects[0]


@dataclass
class Scanner:
    ledger: Ledger
    overdue_sql: tuple[str, Any] = ("", None)

    @property
    def overdue_now(self) -> datetime:
        return self.ledger.steady_now + OVERDUE_AFTER

    def prepare(self) -> None:
        self.overdue_sql = scan_statement(self.ledger, self.overdue_now)
        steady = reconcile_once(self.ledger.store, None, POLICY, now=self.ledger.steady_now)
        if steady.examined or steady.recorded:
            raise RuntimeError(f"{self.ledger.name}: open jobs overdue at the steady clock")
        candidates = overdue_jobs(self.ledger.store, self.overdue_now, POLICY)
        found = findings(candidates, self.overdue_now, POLICY)
        want = self.ledger.plan.open_jobs
        if len(candidates) != want or len(found) != want:
            raise RuntimeError(
                f"{self.ledger.name}: {len(candidates)} overdue, {len(found)} findings; "
                f"expected {want} of each"
            )

    def steady(self) -> None:
        reconcile_once(self.ledger.store, None, POLICY, now=self.ledger.steady_now)

    def overdue(self) -> None:
        now = self.overdue_now
        findings(overdue_jobs(self.ledger.store, now, POLICY), now, POLICY)

    def overdue_sql_only(self) -> None:
        statement, parameters = self.overdue_sql
        with self.ledger.store.reading() as conn:
            conn.exec_driver_sql(statement, parameters).all()

    def run(self, scan: str) -> tuple[float, float]:
        """(wall, this process's CPU) milliseconds of one scan."""
        action: Callable[[], None] = {
            STEADY: self.steady,
            OVERDUE: self.overdue,
            OVERDUE_SQL: self.overdue_sql_only,
            STEADY_CHURNED: self.steady,
            OVERDUE_CHURNED: self.overdue,
        }[scan]
        cpu, wall = time.process_time(), time.perf_counter()
        action()
        return (time.perf_counter() - wall) * 1000.0, (time.process_time() - cpu) * 1000.0


@dataclass(frozen=True)
class Timing:
    """Milliseconds per scan over the timed repetitions: wall clock, and the CPU time of this
    process (the client's share; it shows what other load on the machine adds to the wall)."""

    ms: tuple[float, ...]
    cpu_ms: tuple[float, ...]

    @property
    def median(self) -> float:
        return statistics.median(self.ms)

    @property
    def p95(self) -> float:
        if len(self.ms) < 2:
            return self.ms[0]
        return statistics.quantiles(self.ms, n=20, method="inclusive")[-1]

    @property
    def low(self) -> float:
        return min(self.ms)

    @property
    def cpu_median(self) -> float:
        return statistics.median(self.cpu_ms)


Timings = dict[str, dict[str, Timing]]  # scan -> ledger -> timing


def measure(scanners: dict[str, Scanner], reps: int, scans: Sequence[str]) -> Timings:
    for scanner in scanners.values():
        scanner.prepare()
        for scan in scans:
            for _ in range(WARMUP):
                scanner.run(scan)
    samples: dict[str, dict[str, list[tuple[float, float]]]] = {
        s: {n: [] for n in scanners} for s in scans
    }
    order = list(scanners)
    for rep in range(reps):
        for scan in scans:
            for name in order if rep % 2 == 0 else reversed(order):
                samples[scan][name].append(scanners[name].run(scan))
    return {
        s: {n: Timing(tuple(w for w, _ in ms), tuple(c for _, c in ms)) for n, ms in by.items()}
        for s, by in samples.items()
    }


def explain(scanner: Scanner, now: datetime) -> list[str]:
    statement, parameters = scan_statement(scanner.ledger, now)
    with scanner.ledger.store.reading() as conn:
        rows = conn.exec_driver_sql("EXPLAIN (ANALYZE, BUFFERS) " + statement, parameters).all()
    return [str(r[0]) for r in rows]


def uses_open_index(plan: Sequence[str]) -> bool:
    joined = "\n".join(plan)
    return "ix_jobs_open" in joined and "Seq Scan on jobs" not in joined


def server_settings(store: EventStore) -> dict[str, str]:
    names = ("server_version", "shared_buffers", "work_mem", "random_page_cost", "jit")
    with store.reading() as conn:
        return {n: str(conn.execute(text(f"SHOW {n}")).scalar_one()) for n in names}


# --- report ----------------------------------------------------------------------------------


def verdicts(timings: Timings) -> dict[str, dict[str, Any]]:
    result: dict[str, dict[str, Any]] = {}
    for scan in timings:
        small, large = timings[scan][SMALL].median, timings[scan][LARGE].median
        ratio = large / small
        result[scan] = {
            "ratio": ratio,
            "ratio_met": ratio <= GOAL_RATIO,
            "large_met": large <= GOAL_LARGE_MS,
        }
    return result


@dataclass(frozen=True)
class Report:
    options: Options
    ledgers: dict[str, Ledger]
    timings: Timings
    server: dict[str, str]
    plans: dict[str, list[str]]  # "<ledger> <clock>" -> EXPLAIN lines (with --explain)


def report_json(report: Report) -> str:
    judged = verdicts(report.timings)
    explained = {
        key: {"uses_open_index": uses_open_index(lines), "plan": lines}
        for key, lines in report.plans.items()
    }
    return json.dumps(
        {
            "bench": "reconcile",
            "open_jobs": report.options.open_jobs,
            "running": report.options.running,
            "reps": report.options.reps,
            "server": report.server,
            "ledgers": {
                name: {
                    "events": ledger.check.events,
                    "jobs": ledger.check.jobs,
                    "open_jobs": ledger.check.open_jobs,
                    "leases": ledger.check.leases,
                    "events_verified": ledger.check.events_verified,
                    "streams_verified": ledger.check.streams_verified,
                    "fill_s": round(ledger.check.fill_s, 1),
                    "churned_jobs": ledger.churned,
                }
                for name, ledger in report.ledgers.items()
            },
            "scans_ms": {
                scan: {
                    name: {
                        "median": round(t.median, 3),
                        "p95": round(t.p95, 3),
                        "min": round(t.low, 3),
                        "cpu_median": round(t.cpu_median, 3),
                    }
                    for name, t in by.items()
                }
                for scan, by in report.timings.items()
            },
            "ratio": {scan: round(v["ratio"], 3) for scan, v in judged.items()},
            "goal": {"ratio_max": GOAL_RATIO, "large_ms_max": GOAL_LARGE_MS},
            "goal_met": {
                scan: judged[scan]["ratio_met"] and judged[scan]["large_met"]
                for scan in GOAL_SCANS
                if scan in judged
            },
            "explain": explained,
        }
    )


def report_table(report: Report) -> str:
    judged = verdicts(report.timings)
    rows = []
    for scan, by in report.timings.items():
        for name, t in by.items():
            ledger = report.ledgers[name]
            rows.append(
                [
                    f"{scan} ({name})",
                    f"{ledger.check.events:,}",
                    f"{ledger.check.jobs:,}",
                    f"{t.median:.2f}",
                    f"{t.p95:.2f}",
                    f"{t.low:.2f}",
                    f"{t.cpu_median:.2f}",
                    f"{judged[scan]['ratio']:.2f}x" if name == LARGE else "",
                ]
            )
    headers = ["scan (ledger)", "events", "jobs", "median ms", "p95 ms", "min ms", "cpu ms"]
    headers.append("B / A")
    lines = [
        f"reconcile benchmark: {report.options.reps} scans per ledger, "
        f"{report.options.open_jobs:,} open jobs ({report.options.running:,} running) in each "
        f"({', '.join(f'{k}={v}' for k, v in report.server.items())})",
        "fill: "
        + "; ".join(
            f"{n}: {lg.check.events:,} events in {lg.check.fill_s:.0f} s, "
            f"{lg.check.events_verified:,} events / {lg.check.streams_verified:,} streams "
            f"verified, {lg.churned:,} churned"
            for n, lg in report.ledgers.items()
        ),
        "",
        render_table(headers, rows),
        "",
        f"goals (median): B / A <= {GOAL_RATIO}, B <= {GOAL_LARGE_MS:.0f} ms",
    ]
    for scan in (s for s in GOAL_SCANS if s in judged):
        v = judged[scan]
        large = report.timings[scan][LARGE].median
        lines.append(
            f"  {scan}: ratio {v['ratio']:.2f}x -> {'met' if v['ratio_met'] else 'NOT met'}; "
            f"B {large:.2f} ms -> {'met' if v['large_met'] else 'NOT met'}"
        )
    for key, plan in report.plans.items():
        verdict = "uses ix_jobs_open" if uses_open_index(plan) else "does NOT use ix_jobs_open"
        lines += ["", f"EXPLAIN (ANALYZE, BUFFERS), {key}: {verdict}", *plan]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    options = parse_options(argv)
    with exit_cleanly_on_sigterm(), ledgers(options) as built:
        scanners = {name: Scanner(ledger) for name, ledger in built.items()}
        large = scanners[LARGE]
        timings = measure(scanners, options.reps, VACUUMED_SCANS)
        plans: dict[str, list[str]] = {}
        if options.explain:
            plans["B vacuumed, steady clock"] = explain(large, large.ledger.steady_now)
            plans["B vacuumed, overdue clock"] = explain(large, large.overdue_now)
        if options.churn:
            for ledger in built.values():
                churn(ledger, ledger.url)
            timings |= measure(scanners, options.reps, CHURNED_SCANS)
            if options.explain:
                plans["B churned, steady clock"] = explain(large, large.ledger.steady_now)
        server = server_settings(built[LARGE].store)
    report = Report(options, built, timings, server, plans)
    print(report_json(report) if options.as_json else report_table(report))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

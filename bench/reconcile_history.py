"""The closed history of bench.reconcile's ledgers, built with the store's own code and
bulk-loaded with COPY.

Each event's row is made by `ledger.chain.event_rows` (payload dumped and normalized, hash
chained to its stream's previous event), exactly as an append records it; only its position
and recorded_at are chosen here. Each job's read-model row is its stream folded by
`ledger.job_fold.evolve` and shaped by the jobs `ViewProjection.row`, as the projection writes
it.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import orjson
import psycopg
from pydantic import BaseModel

from bench._common import libpq_url
from bench._store import SqlStore, ViewProjection, events, jobs
from bench.reconcile_plan import Plan
from ledger.chain import event_rows
from ledger.codes import Code
from ledger.decisions import Caller, JobRequest
from ledger.error_info import ErrorInfo
from ledger.events import (
    JobAccepted,
    JobRefused,
    NewEvent,
    RecordedEvent,
    WorkStarted,
    WorkSucceeded,
    job_stream,
)
from ledger.job_fold import evolve
from ledger.job_view import JobView
from ledger.outcomes import Succeeded
from ledger.tools import ToolContext, ToolSpec, get_tool, tool

STEP = timedelta(milliseconds=1)  # spacing of the closed history's recorded_at
HISTORY_GAP = timedelta(hours=1)  # the closed history ends this long before the open jobs
WINDOW = 100  # closed jobs in flight together: their events interleave like a busy ledger's
CHUNK = 5000  # closed jobs per COPY batch
ACCOUNTS = tuple(f"acct-{i}" for i in range(10))

# Every column but `ledger_hash`: the ledger-wide chain's trigger links each row as COPY
# inserts it (in position order), as it does for every writer that leaves the column out.
EVENT_COLUMNS = tuple(c.name for c in events.columns if c.name != "ledger_hash")
JOB_COLUMNS = tuple(c.name for c in jobs.columns)
EventRow = tuple[Any, ...]
JobRow = tuple[Any, ...]

# --- the jobs' tools: one that reads, one that spends ----------------------------------------

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


def request_for(number: int) -> tuple[Caller, JobRequest, ToolSpec]:
    """The number-th job's caller and request (reads and spends alternate)."""
    name = READS if number % 2 == 0 else SPENDS
    caller = Caller(account=ACCOUNTS[number % len(ACCOUNTS)], token_id=f"token-{number % 7}")
    request = JobRequest(name, {"ref": f"R-{number}"}, idempotency_key=uuid.uuid4().hex)
    return caller, request, spec_of(name)


def accepted(number: int, request_key: bytes) -> NewEvent:
    caller, request, spec = request_for(number)
    payload = JobAccepted(
        account=caller.account,
        tool=request.tool,
        args=request.args,
        idempotency_key=request.idempotency_key,
        request_hash=request.fingerprint(request_key),
        spends=spec.spends,
        timeout_s=spec.timeout_s,
        max_attempts=spec.max_attempts,
    )
    return NewEvent(payload=payload, actor=caller.token_id)


def refused(number: int, request_key: bytes) -> NewEvent:
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
        request_hash=request.fingerprint(request_key),
        spends=spec.spends,
        error=error,
    )
    return NewEvent(payload=payload, actor=caller.token_id)


# --- events and rows ---------------------------------------------------------------------------


def jobs_projection(store: SqlStore) -> ViewProjection[Any]:
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
    """Events as an append records them (`event_rows`), numbered and clocked by hand; their
    request hashes made under the ledger's request key, as a submit makes them."""

    def __init__(self, start: datetime, request_key: bytes) -> None:
        self.position = 0
        self.clock = start
        self.request_key = request_key
        self.pending: list[RecordedEvent] = []  # recorded since the last `drain`

    def drain(self) -> list[RecordedEvent]:
        drained, self.pending = self.pending, []
        return drained

    def record(self, stream: Stream, new: NewEvent) -> RecordedEvent:
        self.position += 1
        self.clock += STEP
        (row,) = event_rows(stream.stream_id, [new], stream.version, stream.prev_hash, self.clock)
        recorded = RecordedEvent(position=self.position, **row)
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


def closed_window(history: History, first: int, count: int) -> list[Stream]:
    """`count` jobs run side by side: all accepted, then all started, then all succeeded."""
    streams = [Stream(job_stream(uuid.uuid4())) for _ in range(count)]
    for offset, stream in enumerate(streams):
        history.record(stream, accepted(first + offset, history.request_key))
    for offset, stream in enumerate(streams):
        worker = f"worker-{(first + offset) % 16}"
        lease = history.clock + timedelta(seconds=30)
        started = WorkStarted(attempt=1, worker=worker, lease_expires_at=lease)
        history.record(stream, NewEvent(payload=started, actor=worker))
    for offset, stream in enumerate(streams):
        worker = f"worker-{(first + offset) % 16}"
        result = {"ref": f"R-{first + offset}", "ok": True}
        succeeded = WorkSucceeded(attempt=1, result=result)
        history.record(stream, NewEvent(payload=succeeded, actor=worker))
    return streams


def closed_history(
    plan: Plan, projection: ViewProjection[Any], start: datetime, request_key: bytes
) -> Iterator[tuple[list[EventRow], list[JobRow]]]:
    """The closed history in COPY batches of (event rows, job rows), in position order."""
    history = History(start, request_key)
    event_rows: list[EventRow] = []
    job_rows: list[JobRow] = []

    def take(streams: list[Stream]) -> None:
        event_rows.extend(event_row(r) for r in history.drain())
        for stream in streams:
            assert stream.view is not None
            job_rows.append(job_row(projection, stream.view))

    for number in range(plan.refused_jobs):
        stream = Stream(job_stream(uuid.uuid4()))
        history.record(stream, refused(number, history.request_key))
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


# --- loading -------------------------------------------------------------------------------------


def copy_rows(
    conn: psycopg.Connection[Any], table: str, columns: Sequence[str], rows: Sequence[EventRow]
) -> None:
    names = ", ".join(columns)
    with conn.cursor() as cur, cur.copy(f"COPY {table} ({names}) FROM STDIN") as copy:
        for row in rows:
            copy.write_row(row)


def load_closed(url: str, plan: Plan, projection: ViewProjection[Any], request_key: bytes) -> int:
    """COPY the closed history in one transaction; move the position sequence past it."""
    start = datetime.now(UTC) - STEP * (plan.events + 1) - HISTORY_GAP
    last = 0
    with psycopg.connect(libpq_url(url)) as conn:
        for event_rows, job_rows in closed_history(plan, projection, start, request_key):
            copy_rows(conn, "events", EVENT_COLUMNS, event_rows)
            copy_rows(conn, "jobs", JOB_COLUMNS, job_rows)
            last = event_rows[-1][0]
        if last:
            conn.execute("SELECT setval(pg_get_serial_sequence('events', 'position'), %s)", (last,))
        conn.commit()
    return last

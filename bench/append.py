"""Append benchmark: one event per transaction, the ledger's SqlStore vs raw psycopg 3.

Run:  .venv/bin/python -m bench.append [--n 1000] [--rounds 5] [--chunk 50]
                                                         [--json] [--database-url URL]

Three variants, on the same Postgres and the same migrated `events` table (triggers in place):

- baseline     raw psycopg 3 (no SQLAlchemy), one connection: INSERT one row shaped like a
               ledger event (data, hash computed beforehand), then commit(). N times.
- append_new   SqlStore.append_jobs([JobAppend(job, [JobAccepted], None)]) for N new jobs, one
               per transaction, the store opened as open_store() opens it: the job's path of
               submit, claim and record. Whatever the store does is timed: hashing and folding
               in Python, then BEGIN, `SELECT outcomes_append_jobs(...)` (lock, head check,
               INSERT, read-model upsert) and COMMIT in one pipelined round trip, against the
               baseline's INSERT and COMMIT.
- append_next  the same, with [WorkStarted] after each job's view (a claim, with its lease).

Inputs (payloads, baseline rows and their hashes) are built before the clock starts; hashing,
serialisation and read-model folding inside the store are timed, as they are part of an append.
After a warm-up, `--rounds` rounds of `--n` events per variant run. Within a round the variants
take turns every `--chunk` events (baseline first on even turns, last on odd ones), so that
drift and other processes' load hit all of them alike (`--chunk` >= `--n`: one turn per round,
alternating across rounds). The report gives each variant's median rate over the rounds and the
ratio of the medians, ours / baseline. "client cpu us" is this process's
CPU time per event (Python, driver, socket system calls): what the store adds on the client.
The machine's load average is printed too: on a busy machine the figures are noisy.

Goal: each append variant reaches >= 0.7x the baseline's rate. The script reports whether the
goal was met and exits 0 either way: speed is measured here, not asserted.

Without --database-url a scratch database `outcomes_bench_<pid>` is created on 127.0.0.1 (admin
URL from OUTCOMES_BENCH_PG_ADMIN, default postgres@127.0.0.1:5432) and dropped at the end, on
error too. With --database-url that database is migrated to head and the benchmark's events
stay in it (the ledger is append-only): give it a throwaway database.
"""

from __future__ import annotations

import argparse
import json
import os
import uuid
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg

from bench._common import (
    Summary,
    Timing,
    exit_cleanly_on_sigterm,
    libpq_url,
    migrate,
    render_table,
    scratch_database,
    server_settings,
    timed,
)
from bench._store import AppendStatus, JobAppend, SqlStore, sql_store
from ledger.chain import event_hash, normalize_data
from ledger.events import JobAccepted, NewEvent, WorkStarted, job_id_of, job_stream
from ledger.job_view import JobView

GOAL = 0.7
WARMUP_N = 200
BASELINE, APPEND_NEW, APPEND_NEXT = "baseline", "append_new", "append_next"
VARIANTS = (BASELINE, APPEND_NEW, APPEND_NEXT)
OURS = (APPEND_NEW, APPEND_NEXT)

INSERT_EVENT = (
    "INSERT INTO events (stream_id, stream_version, event_id, type, data, code, actor,"
    " recorded_at, prev_hash, hash) VALUES (%s, %s, %s, %s, %s::jsonb, %s, %s, %s, %s, %s)"
)

BaselineRow = tuple[str, int, uuid.UUID, str, str, str | None, str, datetime, str | None, str]
Append = tuple[str, NewEvent]


@dataclass(frozen=True)
class Options:
    n: int
    rounds: int
    chunk: int
    database_url: str | None
    as_json: bool


def parse_options(argv: Sequence[str] | None) -> Options:
    parser = argparse.ArgumentParser(
        prog="python -m bench.append", description=__doc__.splitlines()[0] if __doc__ else None
    )
    parser.add_argument("--n", type=int, default=1000, help="events per variant per round")
    parser.add_argument("--rounds", type=int, default=5, help="timed rounds (median reported)")
    parser.add_argument(
        "--chunk", type=int, default=50, help="events per variant between switches (>= n: none)"
    )
    parser.add_argument("--database-url", help="use this database instead of a scratch one")
    parser.add_argument("--json", action="store_true", help="print one JSON line, no table")
    args = parser.parse_args(argv)
    if min(args.n, args.rounds, args.chunk) < 1:
        parser.error("--n, --rounds and --chunk must be at least 1")
    if args.database_url and not args.database_url.startswith("postgres"):
        parser.error("--database-url must be a PostgreSQL URL (the baseline is psycopg)")
    return Options(args.n, args.rounds, args.chunk, args.database_url, args.json)


# --- inputs, built before the clock starts ---------------------------------------------------


def job_accepted() -> JobAccepted:
    return JobAccepted(
        account="acct-bench",
        tool="examples.echo",
        args={"text": "hello", "count": 3},
        idempotency_key=uuid.uuid4().hex,
        timeout_s=60.0,
        max_attempts=3,
    )


def baseline_row(payload: JobAccepted) -> BaselineRow:
    """A row like the store's first event of a job stream (in its own `bench-` stream)."""
    stream_id, event_id = f"bench-{uuid.uuid4()}", uuid.uuid4()
    data = normalize_data(payload.model_dump(mode="json"))
    recorded_at, actor = datetime.now(UTC), "bench"
    digest = event_hash(
        event_id=str(event_id),
        stream_id=stream_id,
        stream_version=1,
        type=payload.type,
        data=data,
        code=None,
        actor=actor,
        recorded_at=recorded_at,
        prev_hash=None,
    )
    return (
        stream_id,
        1,
        event_id,
        payload.type,
        json.dumps(data),
        None,
        actor,
        recorded_at,
        None,
        digest,
    )


def new_jobs(n: int) -> list[Append]:
    return [
        (job_stream(uuid.uuid4()), NewEvent(payload=job_accepted(), actor="token-bench"))
        for _ in range(n)
    ]


def work_started(stream_ids: Sequence[str]) -> list[Append]:
    lease = datetime.now(UTC) + timedelta(seconds=30)
    started = WorkStarted(attempt=1, worker="worker-bench", lease_expires_at=lease)
    return [(s, NewEvent(payload=started, actor="worker-bench")) for s in stream_ids]


# --- the timed loops ---------------------------------------------------------------------------


def insert_rows(conn: psycopg.Connection[Any], rows: Sequence[BaselineRow]) -> None:
    for row in rows:
        conn.execute(INSERT_EVENT, row)
        conn.commit()


def append_each(
    store: SqlStore, appends: Sequence[Append], before: Sequence[JobView | None]
) -> list[JobView]:
    views = []
    for (stream_id, event), view in zip(appends, before, strict=True):
        (done,) = store.append_jobs([JobAppend(job_id_of(stream_id), [event], view)])
        if done.status is not AppendStatus.OK:
            raise RuntimeError(f"{stream_id}: {done.status}")
        views.append(done.job)
    return views


def total(timings: Sequence[Timing]) -> Timing:
    return Timing(
        sum(t.n for t in timings), sum(t.wall_s for t in timings), sum(t.cpu_s for t in timings)
    )


@dataclass(frozen=True)
class RoundInputs:
    rows: list[BaselineRow]
    created: list[Append]
    started: list[Append]

    @classmethod
    def build(cls, n: int) -> RoundInputs:
        rows = [baseline_row(job_accepted()) for _ in range(n)]
        created = new_jobs(n)
        return cls(rows, created, work_started([stream_id for stream_id, _ in created]))


@dataclass
class Bench:
    store: SqlStore
    conn: psycopg.Connection[Any]
    chunk: int
    turns: int = 0  # chunks run so far: the baseline goes first on even turns, last on odd

    def baseline(self, rows: Sequence[BaselineRow]) -> Timing:
        return timed(len(rows), lambda: insert_rows(self.conn, rows))

    def ours(self, created: Sequence[Append], started: Sequence[Append]) -> dict[str, Timing]:
        views: list[JobView] = []

        def create() -> None:
            views.extend(append_each(self.store, created, [None] * len(created)))

        def start() -> None:
            append_each(self.store, started, views)

        return {APPEND_NEW: timed(len(created), create), APPEND_NEXT: timed(len(started), start)}

    def turn(self, inputs: RoundInputs, part: slice) -> dict[str, Timing]:
        baseline_first = self.turns % 2 == 0
        self.turns += 1
        if baseline_first:
            base = self.baseline(inputs.rows[part])
        ours = self.ours(inputs.created[part], inputs.started[part])
        if not baseline_first:
            base = self.baseline(inputs.rows[part])
        return {BASELINE: base, **ours}

    def round(self, n: int) -> dict[str, Timing]:
        """n events per variant, alternating variants every `chunk` events."""
        inputs = RoundInputs.build(n)
        parts: dict[str, list[Timing]] = {v: [] for v in VARIANTS}
        for start in range(0, n, self.chunk):
            for variant, timing in self.turn(inputs, slice(start, start + self.chunk)).items():
                parts[variant].append(timing)
        return {v: total(t) for v, t in parts.items()}


def run_rounds(bench: Bench, options: Options) -> dict[str, Summary]:
    bench.round(min(WARMUP_N, options.n))  # warm-up, discarded
    timings: dict[str, list[Timing]] = {v: [] for v in VARIANTS}
    for _ in range(options.rounds):
        for variant, timing in bench.round(options.n).items():
            timings[variant].append(timing)
    return {v: Summary.of(t) for v, t in timings.items()}


# --- databases -------------------------------------------------------------------------------


@contextmanager
def ledger_database(url: str | None) -> Iterator[str]:
    """The given database, or a scratch one dropped afterwards; migrated to head either way."""
    with ExitStack() as stack:
        target = url or stack.enter_context(scratch_database("outcomes_bench"))
        migrate(target)
        yield target


@contextmanager
def connected(url: str, chunk: int) -> Iterator[Bench]:
    with sql_store(url) as store, psycopg.connect(libpq_url(url)) as conn:
        yield Bench(store, conn, chunk)


def postgres_settings(conn: psycopg.Connection[Any]) -> dict[str, str]:
    names = ("server_version", "synchronous_commit", "fsync", "wal_sync_method")
    settings = server_settings(conn, names)
    conn.commit()
    return settings


# --- report ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Run:
    options: Options
    server: dict[str, str]
    load: tuple[float, float]  # 1-minute load average before and after: noise indicator
    summaries: dict[str, Summary]

    @property
    def ratios(self) -> dict[str, float]:
        base = self.summaries[BASELINE].median
        return {v: self.summaries[v].median / base for v in OURS}

    @property
    def goal_met(self) -> bool:
        return all(r >= GOAL for r in self.ratios.values())


def report_json(run: Run) -> str:
    summaries = run.summaries
    return json.dumps(
        {
            "bench": "append",
            "n": run.options.n,
            "rounds": run.options.rounds,
            "chunk": run.options.chunk,
            "server": run.server,
            "load_avg_1m": list(run.load),
            "median_eps": {v: round(s.median, 1) for v, s in summaries.items()},
            "rates_eps": {v: [round(r, 1) for r in s.rates] for v, s in summaries.items()},
            "client_cpu_us": {v: round(cpu_us(s), 1) for v, s in summaries.items()},
            "ratio": {v: round(r, 3) for v, r in run.ratios.items()},
            "goal_ratio": GOAL,
            "goal_met": run.goal_met,
        }
    )


def cpu_us(summary: Summary) -> float:
    return summary.median_cpu_us or 0.0


def table_row(variant: str, summary: Summary, ratio: float) -> list[str]:
    return [
        variant,
        f"{summary.median:,.0f}",
        f"{summary.low:,.0f}",
        f"{summary.high:,.0f}",
        f"{1e6 / summary.median:,.0f}",
        f"{cpu_us(summary):,.0f}",
        f"{ratio:.2f}x",
    ]


def report_table(run: Run) -> str:
    ratio = run.ratios | {BASELINE: 1.0}
    headers = ["variant", "median ev/s", "min", "max", "us/event", "client cpu us", "ours/base"]
    rows = [table_row(v, s, ratio[v]) for v, s in run.summaries.items()]
    settings = ", ".join(f"{k}={v}" for k, v in run.server.items())
    verdicts = [f"  {v}: {ratio[v]:.2f}x {'met' if ratio[v] >= GOAL else 'NOT met'}" for v in OURS]
    return "\n".join(
        [
            f"append: {run.options.rounds} rounds x {run.options.n} single-event transactions"
            f" per variant, taking turns every {run.options.chunk} (medians over rounds)",
            f"postgres: {settings}",
            f"load average (1 min) before/after: {run.load[0]:.2f} / {run.load[1]:.2f}",
            "",
            render_table(headers, rows),
            "",
            f"goal: ours / baseline >= {GOAL:.1f}x -> {'met' if run.goal_met else 'NOT met'}",
            *verdicts,
        ]
    )


def main(argv: Sequence[str] | None = None) -> int:
    options = parse_options(argv)
    load_before = os.getloadavg()[0]
    with (
        exit_cleanly_on_sigterm(),
        ledger_database(options.database_url) as url,
        connected(url, options.chunk) as bench,
    ):
        server = postgres_settings(bench.conn)
        summaries = run_rounds(bench, options)
    run = Run(options, server, (load_before, os.getloadavg()[0]), summaries)
    print(report_json(run) if options.as_json else report_table(run))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

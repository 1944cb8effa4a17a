"""One round of bench.contention, the workload its --vs subprocesses run: the calls (a ledger
append, a raw INSERT), the threads driving them, the pg_stat_activity sampler counting lock
waits meanwhile, each timed phase and the round on its database. Loaded by path beside
bench/contention.py in a --vs subprocess (see its BOOT), so the workload is always the
invoking checkout's while the product it drives is the subprocess's checkout's."""

from __future__ import annotations

import hashlib
import json
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psycopg

from bench._common import libpq_url, migrate, percentile, scratch_database, server_settings
from bench._store import AppendStatus, JobAppend, SqlStore, sql_store
from bench.append import job_accepted
from ledger.chain import normalize_data
from ledger.events import NewEvent, job_id_of, job_stream


@dataclass(frozen=True)
class Options:
    """A run's options (bench.contention's command line): here, below the report, which
    holds them, and the entry, which parses them."""

    threads: int
    seconds: float
    rounds: int
    database_url: str | None
    vs: Path | None
    as_json: bool
    worker: bool = False
    turn: int = 0


WARMUP_CALLS = 20  # per thread and variant, before the timed phases
SAMPLE_INTERVAL_S = 0.005
LEDGER, BASELINE = "ledger", "raw psycopg"
VARIANTS = (LEDGER, BASELINE)
SETTINGS = ("server_version", "synchronous_commit", "fsync", "wal_sync_method", "commit_delay")

BASELINE_TABLE = """CREATE TABLE IF NOT EXISTS bench_contention_rows (
    position bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    stream_id varchar NOT NULL, stream_version integer NOT NULL, event_id uuid NOT NULL,
    type varchar NOT NULL, data jsonb NOT NULL, code varchar, actor varchar NOT NULL,
    recorded_at timestamptz NOT NULL, prev_hash varchar, hash varchar NOT NULL)"""
INSERT_ROW = (
    "INSERT INTO bench_contention_rows (stream_id, stream_version, event_id, type, data, code,"
    " actor, recorded_at, prev_hash, hash) VALUES (%s, %s, %s, %s, %s::jsonb, %s, %s, %s, %s, %s)"
)
SAMPLE = """SELECT count(*) FILTER (WHERE wait_event_type = 'Lock' AND wait_event = 'advisory'),
       count(*) FILTER (WHERE wait_event_type = 'Lock')
  FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()"""

Call = Callable[[], None]  # one append, its input made
NextCall = Callable[[], Call]  # makes the next call's input (outside its latency)


# --- the calls: inputs made between calls ------------------------------------------------------


def ledger_calls(store: SqlStore) -> NextCall:
    def next_call() -> Call:
        stream_id = job_stream(uuid.uuid4())
        event = NewEvent(payload=job_accepted(), actor="token-bench")
        item = JobAppend(job_id_of(stream_id), [event], None)

        def call() -> None:
            (done,) = store.append_jobs([item])
            if done.status is not AppendStatus.OK:
                raise RuntimeError(f"{stream_id}: {done.status}")

        return call

    return next_call


def baseline_calls(conn: psycopg.Connection[Any]) -> NextCall:
    data = json.dumps(normalize_data(job_accepted().model_dump(mode="json")))

    def next_call() -> Call:
        event_id = uuid.uuid4()
        digest = hashlib.sha256(event_id.bytes).hexdigest()
        stream_id, recorded_at = f"bench-{uuid.uuid4()}", datetime.now(UTC)
        row = (stream_id, 1, event_id, "job.accepted", data, None, "bench", recorded_at, None)
        return lambda: conn.execute(INSERT_ROW, (*row, digest)).close()

    return next_call


# --- threads and the sampler -------------------------------------------------------------------


@dataclass(frozen=True)
class Budget:
    """How long each thread keeps calling: for `seconds`, or `calls` times."""

    seconds: float | None = None
    calls: int | None = None

    def more(self, done: int, elapsed: float) -> bool:
        if self.calls is not None:
            return done < self.calls
        return elapsed < (self.seconds or 0.0)


@dataclass
class Driven:
    """What the threads of one phase did: every call's latency (seconds) and the phase's wall
    time, from the threads' start to the last one's end."""

    latencies: list[float] = field(default_factory=list)
    wall_s: float = 0.0


def call_loop(
    next_call: NextCall, budget: Budget, start: threading.Barrier, out: list[float]
) -> None:
    start.wait()
    begun = time.perf_counter()
    while budget.more(len(out), time.perf_counter() - begun):
        call = next_call()
        called = time.perf_counter()
        call()
        out.append(time.perf_counter() - called)


def drive(calls: Sequence[NextCall], budget: Budget) -> Driven:
    """One thread per NextCall, all released at once; a failure in any fails the phase."""
    start = threading.Barrier(len(calls) + 1)
    outs: list[list[float]] = [[] for _ in calls]
    failures: list[BaseException] = []

    def body(next_call: NextCall, out: list[float]) -> None:
        try:
            call_loop(next_call, budget, start, out)
        except BaseException as exc:  # reported by the phase, after every thread ends
            failures.append(exc)

    threads = [threading.Thread(target=body, args=pair) for pair in zip(calls, outs, strict=True)]
    for thread in threads:
        thread.start()
    start.wait()
    begun = time.perf_counter()
    for thread in threads:
        thread.join()
    if failures:
        raise failures[0]
    return Driven([x for out in outs for x in out], time.perf_counter() - begun)


@dataclass(frozen=True)
class Samples:
    count: int
    advisory: int  # sum over samples of the backends waiting on an advisory lock
    lock: int  # the same for any lock (wait_event_type = 'Lock')
    most_advisory: int  # the most backends seen waiting on one at once
    period_s: float  # the sampler's mean period


class Sampler:
    """Polls pg_stat_activity on its own connection while a phase runs."""

    def __init__(self, url: str, interval_s: float = SAMPLE_INTERVAL_S) -> None:
        self.conn = psycopg.connect(libpq_url(url), autocommit=True)
        self.interval_s = interval_s
        self.stopping = threading.Event()
        self.seen: list[tuple[int, int]] = []
        self.thread = threading.Thread(target=self._poll)
        self.failure: BaseException | None = None
        self.begun = self.ended = 0.0

    def _poll(self) -> None:
        try:
            while not self.stopping.is_set():
                advisory, lock = self.conn.execute(SAMPLE).fetchall()[0]
                self.seen.append((int(advisory), int(lock)))
                self.stopping.wait(self.interval_s)
        except BaseException as exc:  # reported by samples(): a phase is not half-sampled
            self.failure = exc

    def __enter__(self) -> Sampler:
        self.begun = time.perf_counter()
        self.thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self.stopping.set()
        self.thread.join()
        self.ended = time.perf_counter()
        self.conn.close()

    def samples(self) -> Samples:
        if self.failure is not None:
            raise RuntimeError("the pg_stat_activity sampler failed") from self.failure
        count = len(self.seen)
        period = (self.ended - self.begun) / count if count else self.interval_s
        advisory = [a for a, _ in self.seen]
        lock = sum(k for _, k in self.seen)
        return Samples(count, sum(advisory), lock, max(advisory, default=0), period)


# --- one round ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Phase:
    """One variant's timed phase in one round."""

    jobs: int
    wall_s: float
    p50_ms: float
    p99_ms: float
    samples: Samples

    @classmethod
    def of(cls, driven: Driven, samples: Samples) -> Phase:
        p50, p99 = (1000 * percentile(driven.latencies, q) for q in (0.50, 0.99))
        return cls(len(driven.latencies), driven.wall_s, p50, p99, samples)

    @property
    def rate(self) -> float:
        return self.jobs / self.wall_s


@dataclass(frozen=True)
class Round:
    code: str  # the checkout `ledger` was imported from
    server: dict[str, str]
    appended: int  # ledger appends in all, warm-up included: the events it added
    phases: dict[str, Phase]

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, line: str) -> Round:
        raw = json.loads(line)
        phases = {
            v: Phase(**{**p, "samples": Samples(**p["samples"])}) for v, p in raw["phases"].items()
        }
        return cls(raw["code"], raw["server"], raw["appended"], phases)


def imported_code() -> str:
    import ledger

    return str(Path(ledger.__file__).resolve().parents[1])


@contextmanager
def round_database(url: str | None) -> Iterator[str]:
    """The given database, or a scratch one dropped afterwards; migrated to head and given the
    baseline's table either way."""
    with ExitStack() as stack:
        target = url or stack.enter_context(scratch_database("outcomes_contention"))
        migrate(target)
        with psycopg.connect(libpq_url(target), autocommit=True) as conn:
            conn.execute(BASELINE_TABLE)
        yield target


@dataclass
class Rig:
    url: str
    threads: int
    store: SqlStore
    conns: list[psycopg.Connection[Any]]

    def calls(self, variant: str) -> list[NextCall]:
        if variant == LEDGER:
            return [ledger_calls(self.store) for _ in range(self.threads)]
        return [baseline_calls(conn) for conn in self.conns]

    def warm_up(self) -> None:
        for variant in VARIANTS:
            drive(self.calls(variant), Budget(calls=WARMUP_CALLS))

    def phase(self, variant: str, seconds: float) -> Phase:
        calls = self.calls(variant)
        with Sampler(self.url) as sampler:
            driven = drive(calls, Budget(seconds=seconds))
        return Phase.of(driven, sampler.samples())


@contextmanager
def rigged(url: str, threads: int) -> Iterator[Rig]:
    with ExitStack() as stack:
        store = stack.enter_context(sql_store(url, pool_size=threads))
        conns = [
            stack.enter_context(psycopg.connect(libpq_url(url), autocommit=True))
            for _ in range(threads)
        ]
        yield Rig(url, threads, store, conns)


def run_round(url: str | None, threads: int, seconds: float, turn: int) -> Round:
    """Warm-up, then both phases, the ledger first on even turns, last on odd ones."""
    order = VARIANTS if turn % 2 == 0 else VARIANTS[::-1]
    with round_database(url) as target, rigged(target, threads) as rig:
        rig.warm_up()
        phases = {variant: rig.phase(variant, seconds) for variant in order}
        server = server_settings(rig.conns[0], SETTINGS)
    appended = threads * WARMUP_CALLS + phases[LEDGER].jobs
    return Round(imported_code(), server, appended, {v: phases[v] for v in VARIANTS})

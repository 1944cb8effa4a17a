"""Contention benchmark: T threads appending single-event jobs at once, with the advisory-lock
waits Postgres shows meanwhile, beside raw psycopg 3 doing the same number of commits.

Run:  .venv/bin/python -m bench.contention [--threads 16] [--seconds 5]
                                          [--rounds 3] [--json] [--database-url URL | --vs PATH]

Two variants, each a timed phase of `--seconds` seconds (a duration, not a count: every
thread keeps appending until the phase ends, so all T writers contend for the whole phase and
no straggler runs alone at the end; the jobs counted are those appended in it):

- ledger       T threads, each appending new jobs one at a time: a `job.accepted` event per
               call through `SqlStore.append_jobs([one JobAppend])`, each call its own
               transaction (the store's autocommit path, as bench.append's `append_new`), one
               store opened as `open_ledger` opens it, its pool sized for T.
- raw psycopg  T threads, each on its own connection (autocommit), INSERTing one row shaped
               like that event into a plain table (`bench_contention_rows`: the events'
               columns, an identity key, no trigger), the INSERT its own transaction: what
               Postgres itself gives T committing writers on this machine.

A call's input (a job's payload, a row) is made in its thread between calls: outside its
latency, inside the phase. During each phase a sampler thread, on its own connection, polls
`pg_stat_activity` every ~5 ms and counts the backends of the bench's database waiting on a
lock: `wait_event_type = 'Lock' AND wait_event = 'advisory'`, and any `wait_event_type =
'Lock'`. "advisory waits/job" is the sum over samples of the waiting backends / the jobs
appended; "est. wait ms/job" is that sum x the sampler's mean period / jobs. Sampled, so these
are estimates (a wait shorter than a period is seen in proportion to its length, on average).

Each round runs on a fresh scratch database migrated to head (both phases in it, the order
alternating per round, after a warm-up of 20 calls per thread and variant that the timed
figures leave out). Reported per variant: appends/s (median over rounds; min, max), the
medians over rounds of each round's p50 and p99 latency per call, lock waits per job (over all
rounds), and ledger / raw psycopg.

--vs PATH: the same workload on another checkout of the project (a directory holding one,
e.g. `git worktree add /tmp/wt-main main`), in turns with this one: round r runs ours then
theirs (r even) or theirs then ours (r odd), each in its own subprocess with its checkout as
cwd. The harness is this file, loaded by path in both (a checkout of main has no
bench/contention.py yet): the workload is the same byte for byte, while the product
(`ledger/`, `migrations/`, bench/_common.py, bench/_store.py) is the checkout's, on its own
scratch database migrated by its migrations. Each subprocess reports the checkout it imported
`ledger` from, checked against the one asked for. The report adds A/B: appends/s ours / theirs,
and lock waits per job ours / theirs.

Goals (the contention issue): A/B >= 1.5x; advisory-lock waits per job <= 0.05x main's, both
with --vs PATH a checkout of main. The script prints whether each goal was met and exits 0
either way: speed is measured here, not asserted. The machine's load average is printed too:
on a busy machine the figures are noisy.

Without --database-url each round's scratch database `outcomes_contention_<pid>` is created on
127.0.0.1 (admin URL from OUTCOMES_BENCH_PG_ADMIN, default postgres@127.0.0.1:5432) and dropped
after it, on error too. With --database-url every round uses that database, migrated to head,
and its jobs and rows stay in it (the ledger is append-only): give it a throwaway database.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import statistics
import subprocess
import sys
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

from bench._common import (
    exit_cleanly_on_sigterm,
    libpq_url,
    migrate,
    percentile,
    render_table,
    scratch_database,
    server_settings,
)
from bench._store import AppendStatus, JobAppend, SqlStore, sql_store
from bench.append import job_accepted
from ledger.chain import normalize_data
from ledger.events import NewEvent, job_id_of, job_stream

GOAL_AB = 1.5  # appends/s, ours / theirs (main): at least
GOAL_LOCK = 0.05  # advisory-lock waits per job, ours / theirs (main): at most
WARMUP_CALLS = 20  # per thread and variant, before the timed phases
SAMPLE_INTERVAL_S = 0.005
LEDGER, BASELINE = "ledger", "raw psycopg"
VARIANTS = (LEDGER, BASELINE)
OURS, THEIRS = "ours", "theirs"
HARNESS = Path(__file__).resolve()
ROOT = HARNESS.parents[1]
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
# A subprocess of --vs: this file, run by path, with the checkout's own code first on sys.path.
BOOT = (
    "import os, runpy, sys; sys.path.insert(0, os.getcwd()); "
    "runpy.run_path(sys.argv.pop(1), run_name='__main__')"
)

Call = Callable[[], None]  # one append, its input made
NextCall = Callable[[], Call]  # makes the next call's input (outside its latency)


@dataclass(frozen=True)
class Options:
    threads: int
    seconds: float
    rounds: int
    database_url: str | None
    vs: Path | None
    as_json: bool
    worker: bool = False
    turn: int = 0


def parse_options(argv: Sequence[str] | None) -> Options:
    parser = argparse.ArgumentParser(
        prog="python -m bench.contention",
        description=__doc__.splitlines()[0] if __doc__ else None,
    )
    parser.add_argument("--threads", type=int, default=16, help="concurrent appenders")
    parser.add_argument("--seconds", type=float, default=5.0, help="each timed phase's length")
    parser.add_argument("--rounds", type=int, default=3, help="timed rounds (median reported)")
    parser.add_argument("--database-url", help="use this database instead of scratch ones")
    parser.add_argument("--vs", type=Path, metavar="PATH", help="another checkout to compare")
    parser.add_argument("--json", action="store_true", help="print one JSON line, no table")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--turn", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if min(args.threads, args.rounds) < 1 or args.seconds <= 0:
        parser.error("--threads and --rounds must be at least 1, --seconds more than 0")
    if args.database_url and not args.database_url.startswith("postgres"):
        parser.error("--database-url must be a PostgreSQL URL (the sampler reads Postgres)")
    if args.vs is not None:
        if args.database_url:
            parser.error("--vs runs each checkout on its own scratch databases: no --database-url")
        if not (args.vs / "ledger" / "__init__.py").is_file():
            parser.error(f"--vs {args.vs}: not a checkout of the project (no ledger/ in it)")
        args.vs = args.vs.resolve()
    return Options(
        args.threads,
        args.seconds,
        args.rounds,
        args.database_url,
        args.vs,
        args.json,
        args.worker,
        args.turn,
    )


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


# --- --vs: each side's rounds in subprocesses ---------------------------------------------------


def worker_argv(options: Options, turn: int) -> list[str]:
    return [
        sys.executable,
        "-c",
        BOOT,
        str(HARNESS),
        "--worker",
        f"--threads={options.threads}",
        f"--seconds={options.seconds}",
        f"--turn={turn}",
    ]


def run_worker(root: Path, options: Options, turn: int) -> Round:
    """One round in a subprocess importing the checkout at `root`; it drops its scratch
    database if stopped (SIGTERM), so this one stops it that way on the way out."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONSAFEPATH")}
    child = subprocess.Popen(
        worker_argv(options, turn),
        cwd=root,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        out, err = child.communicate()
    except BaseException:
        child.terminate()
        child.wait(timeout=60)
        raise
    if child.returncode != 0:
        raise RuntimeError(f"the worker in {root} failed ({child.returncode}): {err[-2000:]}")
    done = Round.from_json(out.strip().splitlines()[-1])
    if Path(done.code) != root:
        raise RuntimeError(f"the worker in {root} imported the ledger of {done.code}")
    return done


def side_turns(rounds: int) -> Iterator[tuple[int, tuple[str, str]]]:
    """Round r runs ours then theirs (r even) or theirs then ours (r odd)."""
    for turn in range(rounds):
        yield turn, (OURS, THEIRS) if turn % 2 == 0 else (THEIRS, OURS)


def run_versus(options: Options, vs: Path) -> dict[str, list[Round]]:
    roots = {OURS: ROOT, THEIRS: vs}
    rounds: dict[str, list[Round]] = {OURS: [], THEIRS: []}
    for turn, order in side_turns(options.rounds):
        for side in order:
            rounds[side].append(run_worker(roots[side], options, turn))
    return rounds


def run_here(options: Options) -> dict[str, list[Round]]:
    runs = [
        run_round(options.database_url, options.threads, options.seconds, turn)
        for turn in range(options.rounds)
    ]
    return {OURS: runs}


def commit_of(code: str) -> str:
    """The checkout's commit, "+ changes" when its work tree differs from it."""

    def git(*args: str) -> str:
        try:
            answer = subprocess.run(["git", *args], cwd=code, capture_output=True, text=True)
        except OSError:  # no git, or no such directory
            return ""
        return answer.stdout.strip() if answer.returncode == 0 else ""

    head = git("rev-parse", "--short=12", "HEAD") or "unknown"
    return f"{head} + changes" if git("status", "--porcelain", "--untracked-files=no") else head


# --- figures, goals and the report ---------------------------------------------------------------


@dataclass(frozen=True)
class Figures:
    """One variant of one side over its rounds."""

    rates: tuple[float, ...]
    p50_ms: float  # median over rounds of each round's p50
    p99_ms: float
    jobs: int
    advisory_per_job: float  # sampled: sum of waiting backends over samples / jobs
    advisory_ms_per_job: float  # sampled: that sum x the mean period / jobs
    lock_per_job: float  # the same as advisory_per_job, for any lock wait

    @classmethod
    def of(cls, phases: Sequence[Phase]) -> Figures:
        jobs = sum(p.jobs for p in phases) or 1
        advisory_s = sum(p.samples.advisory * p.samples.period_s for p in phases)
        return cls(
            tuple(p.rate for p in phases),
            statistics.median(p.p50_ms for p in phases),
            statistics.median(p.p99_ms for p in phases),
            sum(p.jobs for p in phases),
            sum(p.samples.advisory for p in phases) / jobs,
            1000 * advisory_s / jobs,
            sum(p.samples.lock for p in phases) / jobs,
        )

    @property
    def median(self) -> float:
        return statistics.median(self.rates)


def ratio(ours: float, theirs: float) -> float | None:
    return ours / theirs if theirs else None


def rate_goal_met(ab: float) -> bool:
    return ab >= GOAL_AB


def lock_goal_met(ours: float, theirs: float) -> bool:
    """Ours <= GOAL_LOCK x theirs; with no wait seen on theirs, met only with none on ours."""
    lock_ratio = ratio(ours, theirs)
    return ours == 0 if lock_ratio is None else lock_ratio <= GOAL_LOCK


@dataclass(frozen=True)
class Run:
    options: Options
    load: tuple[float, float]  # 1-minute load average before and after: noise indicator
    rounds: dict[str, list[Round]]  # per side: ours, and with --vs theirs

    def figures(self, side: str) -> dict[str, Figures]:
        return {v: Figures.of([r.phases[v] for r in self.rounds[side]]) for v in VARIANTS}

    def vs_baseline(self, side: str) -> float:
        figures = self.figures(side)
        return figures[LEDGER].median / figures[BASELINE].median

    @property
    def versus(self) -> bool:
        return THEIRS in self.rounds

    def ab_rate(self) -> float:
        return self.figures(OURS)[LEDGER].median / self.figures(THEIRS)[LEDGER].median

    def lock_waits(self) -> tuple[float, float]:
        """Advisory-lock waits per job, ours and theirs (the ledger variant)."""
        ours, theirs = (self.figures(s)[LEDGER].advisory_per_job for s in (OURS, THEIRS))
        return ours, theirs

    def goals(self) -> dict[str, bool] | None:
        if not self.versus:
            return None
        return {
            "ab_rate": rate_goal_met(self.ab_rate()),
            "lock_waits": lock_goal_met(*self.lock_waits()),
        }


def figures_json(figures: Figures) -> dict[str, Any]:
    return {
        "median_per_s": round(figures.median, 1),
        "rates_per_s": [round(r, 1) for r in figures.rates],
        "p50_ms": round(figures.p50_ms, 3),
        "p99_ms": round(figures.p99_ms, 3),
        "jobs": figures.jobs,
        "advisory_waits_per_job": round(figures.advisory_per_job, 4),
        "advisory_wait_ms_per_job": round(figures.advisory_ms_per_job, 4),
        "lock_waits_per_job": round(figures.lock_per_job, 4),
    }


def side_json(run: Run, side: str) -> dict[str, Any]:
    rounds = run.rounds[side]
    return {
        "code": rounds[0].code,
        "commit": commit_of(rounds[0].code),
        "appended": sum(r.appended for r in rounds),
        "baseline_rows": sum(
            WARMUP_CALLS * run.options.threads + r.phases[BASELINE].jobs for r in rounds
        ),
        "variants": {v: figures_json(f) for v, f in run.figures(side).items()},
        "ledger_vs_baseline": round(run.vs_baseline(side), 3),
        "samples": sum(r.phases[v].samples.count for r in rounds for v in VARIANTS),
    }


def report_json(run: Run) -> str:
    answer: dict[str, Any] = {
        "bench": "contention",
        "threads": run.options.threads,
        "seconds": run.options.seconds,
        "rounds": run.options.rounds,
        "server": run.rounds[OURS][0].server,
        "load_avg_1m": [round(x, 2) for x in run.load],
        "sides": {side: side_json(run, side) for side in run.rounds},
        "goal_ab_rate": GOAL_AB,
        "goal_lock_waits_ratio": GOAL_LOCK,
        "goals_met": run.goals(),
    }
    if run.versus:
        ours, theirs = run.lock_waits()
        lock_ratio = ratio(ours, theirs)
        answer["ab_rate"] = round(run.ab_rate(), 3)
        answer["lock_waits_ratio"] = None if lock_ratio is None else round(lock_ratio, 4)
    return json.dumps(answer)


def table_row(label: str, figures: Figures, vs_raw: str) -> list[str]:
    return [
        label,
        f"{figures.median:,.0f}",
        f"{min(figures.rates):,.0f}",
        f"{max(figures.rates):,.0f}",
        f"{figures.p50_ms:.2f}",
        f"{figures.p99_ms:.2f}",
        f"{figures.advisory_per_job:.3f}",
        f"{figures.advisory_ms_per_job:.3f}",
        f"{figures.lock_per_job:.3f}",
        vs_raw,
    ]


def table_rows(run: Run) -> list[list[str]]:
    rows = []
    for side in run.rounds:
        figures = run.figures(side)
        rows.append(
            table_row(f"{side}: {LEDGER}", figures[LEDGER], f"{run.vs_baseline(side):.2f}x")
        )
        rows.append(table_row(f"{side}: {BASELINE}", figures[BASELINE], "1.00x"))
    return rows


HEADERS = [
    "side: variant",
    "median appends/s",
    "min",
    "max",
    "p50 ms",
    "p99 ms",
    "advisory waits/job",
    "est. advisory ms/job",
    "any-lock waits/job",
    "vs raw",
]


def verdict(met: bool) -> str:
    return "met" if met else "NOT met"


def goal_lines(run: Run) -> list[str]:
    if not run.versus:
        return [
            f"goals (A/B >= {GOAL_AB:.1f}x; lock waits per job <= {GOAL_LOCK:.2f}x main's):"
            " not measured, they need --vs PATH (a checkout of main)"
        ]
    ab = run.ab_rate()
    ours, theirs = run.lock_waits()
    lock_ratio = ratio(ours, theirs)
    shown = "n/a (theirs: none seen)" if lock_ratio is None else f"{lock_ratio:.3f}x"
    return [
        f"A/B, appends/s ours / theirs: {ab:.2f}x",
        f"advisory-lock waits per job, ours / theirs: {ours:.3f} / {theirs:.3f} = {shown}",
        f"goal: A/B >= {GOAL_AB:.1f}x -> {verdict(rate_goal_met(ab))}",
        f"goal: lock waits per job ours / theirs <= {GOAL_LOCK:.2f}x"
        f" -> {verdict(lock_goal_met(ours, theirs))}",
    ]


def header_lines(run: Run) -> list[str]:
    options = run.options
    periods = [
        p.samples.period_s for rs in run.rounds.values() for r in rs for p in r.phases.values()
    ]
    settings = ", ".join(f"{k}={v}" for k, v in run.rounds[OURS][0].server.items())
    return [
        f"contention: {options.rounds} round(s) x {options.seconds:g} s per variant,"
        f" {options.threads} threads, one single-event append (or INSERT) per transaction;"
        " medians over rounds",
        *(f"{side}: {r[0].code} ({commit_of(r[0].code)})" for side, r in run.rounds.items()),
        f"postgres: {settings}",
        f"load average (1 min) before/after: {run.load[0]:.2f} / {run.load[1]:.2f}",
        f"lock waits sampled in pg_stat_activity every ~{SAMPLE_INTERVAL_S * 1000:.0f} ms"
        f" (mean period {1000 * statistics.mean(periods):.1f} ms): estimates",
    ]


def report_table(run: Run) -> str:
    return "\n".join(
        [
            *header_lines(run),
            "",
            render_table(HEADERS, table_rows(run)),
            "",
            *goal_lines(run),
            "(measured, not asserted: the exit status is 0 either way)",
        ]
    )


def main(argv: Sequence[str] | None = None) -> int:
    options = parse_options(argv)
    with exit_cleanly_on_sigterm():
        if options.worker:
            print(run_round(None, options.threads, options.seconds, options.turn).to_json())
            return 0
        load_before = os.getloadavg()[0]
        rounds = run_versus(options, options.vs) if options.vs else run_here(options)
    run = Run(options, (load_before, os.getloadavg()[0]), rounds)
    print(report_json(run) if options.as_json else report_table(run))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Throughput benchmark: jobs per second with full ledger recording, side by side with bare
Celery no-op tasks and with Celery using its own database result backend.

Run:  cd /work/main && .venv/bin/python -m bench.throughput [--n 300] [--rounds 3] [--json]
          [--concurrency 2] [--pool prefork] [--broker-url amqp://...] [--timeout 120]
          [--producers 1] [--hold-open-s 0] [--tree-ab]

One run, the same RabbitMQ and the same Postgres for all three; each variant gets one
`celery worker` OS process (started here by subprocess, stopped by pid at the end) with the
same pool and concurrency, its own fresh queue, and the same worker flags (no heartbeat, gossip
or mingle), log level, prefetch multiplier (OUTCOMES_PREFETCH, default 4) and late acks:

- ours               `ledger.services.submit.submit(...)` through the process's outbox over a
                     `workers.dispatch.CeleryDispatcher` (published after the decision, the
                     broker's confirms recorded), for a no-op, non-spending tool
                     (bench/throughput_tools.py, loaded with OUTCOMES_TOOLS), executed by a
                     real `outcomes worker`: decision,
                     claim (brake re-check, work.started, lease) and outcome, all recorded. Done
                     when no job is open in the jobs table.
- bare_celery        the same no-op as a plain Celery task (bench/throughput_tasks.py), no
                     result backend; done when every task has appended its byte to a counter
                     file (see that module for why a file).
- celery_db_backend  the same task with Celery's `db+postgresql+psycopg://` result backend in a
                     scratch database on the same Postgres; done when celery_taskmeta holds a
                     row for every task.

Each round sends `--n` jobs from this process (one thread) and times first send -> last job
done, polling every 10 ms. After a warm-up round per variant (which also waits for the workers
to come up), `--rounds` rounds run with the variants in rotating order to cancel drift; the
report gives each variant's median rate, the rate of its send phase alone, and the ratios.
It also gives the CPU time each job cost (Linux /proc): the worker's processes, this sending
process, and the Postgres backends of the variant's database. On a machine whose CPUs are the
bottleneck (every process here shares them) throughput follows the sum of those three, and
they move much less than the rates when other work shares the machine.

Ours runs as deployed: an `outcomes reconcile` process beside its worker, which on Postgres is
the sequencer. The report ends with ours' sequencing lag over the timed rounds and, with
`--hold-open-s S`, over two spells of S seconds of ours' rounds back to back, without and with
one transaction held open (bench/throughput_lag.py); goal p99 <= 20 ms, unchanged by the held
transaction. `--tree-ab` runs instead ours with and without the Merkle tree, in alternating turns,
and compares their sequencing lag (bench/throughput_treeab.py).

Goals: ours >= 0.5x bare Celery (stretch 0.8x), ours >= 2x Celery with its result backend,
ours >= 1,000 recorded jobs/s. Speed is measured, not asserted: the script prints whether each
goal was met and exits 0 either way (non-zero only when the benchmark itself failed, e.g. a
worker died or a round timed out).

Scratch databases `outcomes_tput_ledger_<pid>` and `outcomes_tput_celery_<pid>` are created on
OUTCOMES_BENCH_PG_ADMIN (default postgres@127.0.0.1:5432) and dropped at the end; the queues
`bench-throughput-<variant>-<pid>-<random>` are deleted from the broker; on error too.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
import uuid
from collections.abc import Sequence
from contextlib import ExitStack, nullcontext
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import psycopg
from sqlalchemy import create_engine

from bench._common import (
    exit_cleanly_on_sigterm,
    libpq_url,
    migrate,
    scratch_database,
    server_settings,
    sqlalchemy_url,
)
from bench.throughput_lag import (
    Lag,
    held_open,
    lag_after,
    lag_lines,
    probing,
    write_head,
)
from bench.throughput_report import RunInfo, load_average, report_json, report_table, summarize
from bench.throughput_tasks import BACKEND_ENV, BROKER_ENV, COUNTER_ENV, QUEUE_ENV, make_app
from bench.throughput_variants import (
    BACKEND,
    BARE,
    OURS,
    BackendVariant,
    BareVariant,
    LedgerVariant,
    Round,
    Variant,
)
from bench.throughput_workers import (
    Pool,
    WorkerProcess,
    baseline_worker_argv,
    delete_queues,
    ledger_reconcile_argv,
    ledger_worker_argv,
    running_worker,
)
from ledger.runtime.ledger import open_ledger
from ledger.runtime.outbox import Outbox
from ledger.settings import Settings
from workers.app import make_celery
from workers.dispatch import CeleryDispatcher

VARIANTS = (OURS, BARE, BACKEND)
TOOLS_MODULE = "bench.throughput_tools"
DEFAULT_BROKER = os.environ.get("OUTCOMES_BENCH_BROKER_URL", "amqp://guest:guest@127.0.0.1:5672//")


@dataclass(frozen=True)
class Options:
    n: int
    rounds: int
    warmup: int
    pool: Pool
    broker_url: str
    timeout_s: float
    as_json: bool
    producers: int = 1
    hold_open_s: float = 0.0
    tree_ab: bool = False


def parse_options(argv: Sequence[str] | None) -> Options:
    parser = argparse.ArgumentParser(
        prog="python -m bench.throughput",
        description=__doc__.splitlines()[0] if __doc__ else None,
    )
    parser.add_argument("--n", type=int, default=300, help="jobs per variant per round")
    parser.add_argument("--rounds", type=int, default=3, help="timed rounds (median reported)")
    parser.add_argument("--warmup", type=int, default=50, help="jobs in each warm-up round")
    parser.add_argument("--concurrency", type=int, default=2, help="pool size of each worker")
    parser.add_argument(
        "--producers", type=int, default=1, help="threads sending jobs (the same for every variant)"
    )
    parser.add_argument("--pool", choices=["prefork", "threads", "solo"], default="prefork")
    parser.add_argument("--loglevel", default="WARNING", help="the workers' log level")
    parser.add_argument("--broker-url", default=DEFAULT_BROKER, help="RabbitMQ (or Redis) URL")
    parser.add_argument("--timeout", type=float, default=120.0, help="seconds per round, max")
    parser.add_argument(
        "--hold-open-s",
        type=float,
        default=0.0,
        help="then run ours' rounds back to back for this long twice, without and with one"
        " transaction held open, and print the sequencing lag of each (0: no such spells)",
    )
    parser.add_argument("--tree-ab", action="store_true", help="ours' lag with vs without tree")
    parser.add_argument("--json", action="store_true", help="print one JSON line, no table")
    args = parser.parse_args(argv)
    if args.hold_open_s < 0:
        parser.error("--hold-open-s must be at least 0")
    if min(args.n, args.rounds, args.warmup, args.concurrency, args.producers) < 1:
        parser.error("--n, --rounds, --warmup, --concurrency and --producers must be at least 1")
    pool = Pool(args.pool, args.concurrency, args.loglevel)
    return Options(
        args.n,
        args.rounds,
        args.warmup,
        pool,
        args.broker_url,
        args.timeout,
        args.json,
        args.producers,
        args.hold_open_s,
        args.tree_ab,
    )


# --- setting up: databases, queues, workers ---------------------------------------------------


@dataclass
class Setup:
    variants: list[Variant]
    workers: list[WorkerProcess]
    server: dict[str, str]
    ours_url: str  # ours' scratch ledger: the sequencing lag is read there


def _migrated(stack: ExitStack) -> str:
    url = stack.enter_context(scratch_database("outcomes_tput_ledger"))
    migrate(url)
    return url


def _celery_tables(stack: ExitStack) -> str:
    """A scratch database with Celery's result tables made up front (two worker processes
    creating them at their first result would race)."""
    from celery.backends.database.models import ResultModelBase

    url = stack.enter_context(scratch_database("outcomes_tput_celery"))
    engine = create_engine(sqlalchemy_url(url))
    try:
        ResultModelBase.metadata.create_all(engine)
    finally:
        engine.dispose()
    return url


def _autocommit(stack: ExitStack, url: str) -> psycopg.Connection[Any]:
    return stack.enter_context(psycopg.connect(libpq_url(url), autocommit=True))


def _ours(
    stack: ExitStack,
    url: str,
    options: Options,
    queue: str,
    logs: Path,
    arm: str = OURS,  # --tree-ab: an arm, and its reconciler's command if not `outcomes`'
    reconcile: Sequence[str] = (),
) -> LedgerVariant:
    settings = Settings(
        database_url=sqlalchemy_url(url),
        broker_url=options.broker_url,
        tools=(TOOLS_MODULE,),
        queue=queue,
        lease_s=30.0,
        dispatch_timeout_s=30.0,
    )
    ledger = stack.enter_context(open_ledger(settings.database_url, pool_size=2))
    app = make_celery(settings)
    stack.callback(app.close)
    env = {
        "OUTCOMES_DATABASE_URL": settings.database_url,
        "OUTCOMES_BROKER_URL": options.broker_url,
        "OUTCOMES_TOOLS": TOOLS_MODULE,
        "OUTCOMES_QUEUE": queue,
    }
    worker = stack.enter_context(running_worker(arm, ledger_worker_argv(options.pool), env, logs))
    # As deployed: a reconciler runs beside the workers, and on Postgres it is the sequencer.
    reconciler = "reconciler" if arm == OURS else f"reconciler-{arm}"
    argv = list(reconcile) or ledger_reconcile_argv()
    stack.enter_context(running_worker(reconciler, argv, env, logs))
    poll = _autocommit(stack, url)
    # The poll counts open jobs on the partial index ix_jobs_open. The planner's statistics lag
    # this churn, and a sequential scan of every job each 10 ms cost the database more than
    # some of what is measured: this session uses the index.
    poll.execute("SET enable_seqscan = off")
    dispatcher = CeleryDispatcher(app, queue)
    stack.callback(dispatcher.close)
    # As the API does: the process's outbox publishes after the decision, on its own threads.
    outbox = Outbox(ledger, dispatcher)
    stack.callback(outbox.close)
    return LedgerVariant(ledger, outbox, poll, worker, name=arm)


def _baseline_env(options: Options, queue: str, counter: str, backend: str) -> dict[str, str]:
    return {
        BROKER_ENV: options.broker_url,
        QUEUE_ENV: queue,
        COUNTER_ENV: counter,
        BACKEND_ENV: backend,
    }


def _bare(stack: ExitStack, options: Options, queue: str, logs: Path) -> BareVariant:
    counter = logs / "bare.counter"
    app = make_app(options.broker_url, queue)
    stack.callback(app.close)
    env = _baseline_env(options, queue, str(counter), "")
    argv = baseline_worker_argv(options.pool, queue, f"bench-bare-{os.getpid()}")
    worker = stack.enter_context(running_worker(BARE, argv, env, logs))
    return BareVariant(app, queue, counter, worker)


def _backend(stack: ExitStack, options: Options, queue: str, logs: Path) -> BackendVariant:
    url = _celery_tables(stack)
    backend = "db+" + sqlalchemy_url(url)
    app = make_app(options.broker_url, queue, backend)
    stack.callback(app.close)
    env = _baseline_env(options, queue, "", backend)
    argv = baseline_worker_argv(options.pool, queue, f"bench-backend-{os.getpid()}")
    worker = stack.enter_context(running_worker(BACKEND, argv, env, logs))
    return BackendVariant(app, queue, _autocommit(stack, url), worker)


def set_up(stack: ExitStack, options: Options) -> Setup:
    run_id = f"{os.getpid()}-{uuid.uuid4().hex[:8]}"
    queues = {v: f"bench-throughput-{v}-{run_id}" for v in VARIANTS}
    # Registered first, so it runs last: after every worker has stopped.
    stack.callback(delete_queues, options.broker_url, list(queues.values()))
    logs = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="bench-throughput-")))
    url = _migrated(stack)
    variants: list[Variant] = [
        replace(_ours(stack, url, options, queues[OURS], logs), producers=options.producers),
        replace(_bare(stack, options, queues[BARE], logs), producers=options.producers),
        replace(_backend(stack, options, queues[BACKEND], logs), producers=options.producers),
    ]
    workers = [v.worker for v in variants]
    return Setup(variants, workers, postgres_settings(variants[0]), url)


def postgres_settings(ours: Variant) -> dict[str, str]:
    assert isinstance(ours, LedgerVariant)
    return server_settings(ours.poll, ("server_version", "synchronous_commit", "fsync"))


# --- running -----------------------------------------------------------------------------------


def measured(variant: Variant, n: int, tag: str, timeout_s: float) -> Round:
    """One round, with the CPU time it cost the worker's processes and this process."""
    worker_before, database_before = variant.worker.cpu_seconds(), variant.database_cpu_seconds()
    producer_before = time.process_time()
    result = variant.run(n, tag, timeout_s)
    producer = time.process_time() - producer_before
    worker = _delta(worker_before, variant.worker.cpu_seconds())
    database = _delta(database_before, variant.database_cpu_seconds())
    return replace(result, worker_cpu_s=worker, producer_cpu_s=producer, database_cpu_s=database)


def _delta(before: float | None, after: float | None) -> float | None:
    return None if before is None or after is None else after - before


def run_rounds(setup: Setup, options: Options) -> tuple[dict[str, list[Round]], Lag]:
    """The warm-up, the timed rounds, and the sequencing lag of ours' events in them."""
    # Warm-up: also waits for the workers to come up, so it gets a minute more.
    for variant in setup.variants:
        variant.run(min(options.warmup, options.n), "w", options.timeout_s + 60)
    ours = _ours_of(setup)
    head = write_head(ours.poll)
    results: dict[str, list[Round]] = {v.name: [] for v in setup.variants}
    with probing(setup.ours_url) as probe:
        for number in range(options.rounds):
            shift = number % len(setup.variants)
            for variant in [*setup.variants[shift:], *setup.variants[:shift]]:
                results[variant.name].append(
                    measured(variant, options.n, f"r{number + 1}", options.timeout_s)
                )
        return results, lag_after(ours.poll, head, probe)


def held_rounds(setup: Setup, options: Options) -> tuple[Lag, Lag] | None:
    """Ours' rounds back to back for `--hold-open-s`, twice: without, then with one
    transaction held open throughout; the sequencing lag of each spell."""
    if options.hold_open_s <= 0:
        return None
    plain = _spell(setup, options, "c", hold=False)
    return plain, _spell(setup, options, "h", hold=True)


def _spell(setup: Setup, options: Options, tag: str, *, hold: bool) -> Lag:
    ours = _ours_of(setup)
    head = write_head(ours.poll)
    with probing(setup.ours_url) as probe:
        with held_open(setup.ours_url) if hold else nullcontext():
            until = time.monotonic() + options.hold_open_s
            number = 0
            while number == 0 or time.monotonic() < until:
                number += 1
                ours.run(options.n, f"{tag}{number}", options.timeout_s)
        return lag_after(ours.poll, head, probe)


def _ours_of(setup: Setup) -> LedgerVariant:
    ours = setup.variants[0]
    assert isinstance(ours, LedgerVariant)
    return ours


def main(argv: Sequence[str] | None = None) -> int:
    options = parse_options(argv)
    if options.tree_ab:
        from bench.throughput_treeab import tree_ab

        return tree_ab(options, _ours)
    with exit_cleanly_on_sigterm(), ExitStack() as stack:
        setup = set_up(stack, options)
        load_before = load_average()
        try:
            results, lag = run_rounds(setup, options)
            held = held_rounds(setup, options)
        except Exception:
            for worker in setup.workers:
                print(f"--- {worker.name} worker log (tail) ---\n{worker.tail()}", file=sys.stderr)
            raise
        server = setup.server
    result = summarize(results, options.n, (load_before, load_average()))
    run = RunInfo(
        options.n, options.rounds, options.pool, options.broker_url, server, options.producers
    )
    if options.as_json:
        print(report_json(run, result, (lag, held, options.hold_open_s)))
    else:
        print("\n".join([report_table(run, result), *lag_lines(lag, held, options.hold_open_s)]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

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
import os
import subprocess
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path

from bench._common import exit_cleanly_on_sigterm
from bench.contention_report import OURS, THEIRS, Run, report_json, report_table
from bench.contention_round import Options, Round, run_round

HARNESS = Path(__file__).resolve()
ROOT = HARNESS.parents[1]
# The modules beside this file that it imports, in the order they import each other.
HARNESS_PARTS = ("contention_round", "contention_report")
# A subprocess of --vs: this file, run by path, with the checkout's own code first on sys.path.
# HARNESS_PARTS are loaded by path from beside it first, as bench.<part>: the whole harness is
# this checkout's, whichever copies of them (or none) the other checkout's bench/ holds.
BOOT = f"""\
import importlib.util, os, runpy, sys
sys.path.insert(0, os.getcwd())
harness = sys.argv.pop(1)
for part in {HARNESS_PARTS!r}:
    path = os.path.join(os.path.dirname(harness), part + ".py")
    spec = importlib.util.spec_from_file_location("bench." + part, path)
    sys.modules[spec.name] = module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
runpy.run_path(harness, run_name="__main__")
"""


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

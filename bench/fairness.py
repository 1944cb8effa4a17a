"""Fairness benchmark (docs/fairness.md): account A submits `--jobs` jobs (5,000) of a 50 ms
tool, then account B submits 20. B's jobs should start promptly, not behind A's whole backlog
in the one FIFO broker queue.

Run:  .venv/bin/python -m bench.fairness [--jobs 5000] [--window 32] [--unfair] [--json]

Two `outcomes worker`s (threads pool, 8 each) on a scratch Postgres and RabbitMQ, and the
submits in this process through the product's own use case and outbox (as an API process
does), with the per-account dispatch window `--window` (`OUTCOMES_ACCOUNT_WINDOW`) set here
and on the workers. Two rounds on the same workers:

- idle    B's 20 jobs alone, on an idle ledger;
- loaded  A's jobs, then (as soon as A's are all accepted) B's 20.

For each, B's wait from its decision (`job.accepted`) to its start (`work.started`), from the
events' own timestamps: p50, p95 and the ratio loaded/idle of the p95. Goal: <= 5x. With
`--unfair` it also runs the loaded round without a window (the FIFO queue as it was), for
comparison. Speed is measured, not asserted: it prints whether the goal was met and exits 0
either way.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
import uuid
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from dataclasses import dataclass, replace
from pathlib import Path

from bench._common import (
    migrate,
    percentile,
    render_table,
    scratch_database,
    sqlalchemy_url,
)
from bench.fairness_tools import SLEEP_TOOL
from bench.http import BROKER
from bench.throughput_workers import Pool, delete_queues, ledger_worker_argv, running_worker
from ledger.decisions import Caller, JobRequest
from ledger.events import job_stream
from ledger.fairness import Limits
from ledger.runtime.ledger import Ledger, open_ledger
from ledger.runtime.outbox import Outbox
from ledger.services.submit import submit
from ledger.settings import load_settings
from workers.app import make_celery
from workers.dispatch import CeleryDispatcher

POOL = Pool("threads", 8, "WARNING")
WORKERS = 2
B_JOBS = 20
GOAL = 5.0  # B's p95 wait with A's backlog ahead, at most this many times B's on an idle ledger
A = Caller(account="bench-a", token_id="bench-a")
B = Caller(account="bench-b", token_id="bench-b")
SUBMITTERS = 8  # A's submits come from this many threads, as from many agents at once


@dataclass(frozen=True)
class Waits:
    seconds: list[float]  # each of B's jobs: from its decision to its start

    def percentile(self, q: float) -> float:
        return percentile(self.seconds, q)

    @property
    def p50(self) -> float:
        return statistics.median(self.seconds)

    @property
    def p95(self) -> float:
        return self.percentile(0.95)


def submit_all(ledger: Ledger, outbox: Outbox, caller: Caller, n: int) -> list[str]:
    def one(seq: int) -> str:
        request = JobRequest(tool=SLEEP_TOOL, args={"seq": seq})
        view = submit(ledger, caller, request, outbox).view
        if not view.accepted:
            raise RuntimeError(f"{caller.account}'s job {seq} was refused: {view.error}")
        return view.job_id

    if n <= B_JOBS:
        return [one(i) for i in range(n)]
    with ThreadPoolExecutor(SUBMITTERS) as pool:
        return list(pool.map(one, range(n)))


def started_waits(ledger: Ledger, job_ids: Sequence[str], timeout_s: float) -> Waits:
    """Wait until every one of these jobs started; each one's wait, from its events."""
    deadline = time.monotonic() + timeout_s
    waits: dict[str, float] = {}
    while len(waits) < len(job_ids):
        if time.monotonic() > deadline:
            raise TimeoutError(f"{len(job_ids) - len(waits)} of B's jobs did not start in time")
        for job_id in job_ids:
            if job_id in waits:
                continue
            history = ledger.store.read_stream(job_stream(job_id))
            accepted = [e.recorded_at for e in history if e.type == "job.accepted"]
            started = [e.recorded_at for e in history if e.type == "work.started"]
            if accepted and started:
                waits[job_id] = (started[0] - accepted[0]).total_seconds()
        time.sleep(0.05)  # polling the ledger, as an agent would
    return Waits([waits[j] for j in job_ids])


def wait_drained(ledger: Ledger, job_ids: Sequence[str], timeout_s: float) -> None:
    """Every one of these jobs is closed (the next round starts on an idle ledger)."""
    deadline = time.monotonic() + timeout_s
    wanted = list(job_ids)
    while wanted:
        if time.monotonic() > deadline:
            raise TimeoutError(f"{len(wanted)} of A's jobs did not finish in time")
        with ledger.store.reading() as reads:
            views = reads.jobs_by_id(wanted[:1000])
        wanted = [j for j in wanted if j not in views or not views[j].terminal]
        time.sleep(0.2)  # polling the ledger


def run_round(ledger: Ledger, outbox: Outbox, a_jobs: int, timeout_s: float) -> Waits:
    a_ids = submit_all(ledger, outbox, A, a_jobs) if a_jobs else []
    b_ids = submit_all(ledger, outbox, B, B_JOBS)
    waits = started_waits(ledger, b_ids, timeout_s)
    wait_drained(ledger, a_ids, timeout_s)
    return waits


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.fairness", description=__doc__)
    parser.add_argument("--jobs", type=int, default=5000, help="account A's jobs")
    parser.add_argument("--window", type=int, default=32, help="messages per account (0: off)")
    parser.add_argument("--unfair", action="store_true", help="also run without a window")
    parser.add_argument("--json", action="store_true", help="print one JSON line, no table")
    options = parser.parse_args(argv)
    queue = f"bench-fairness-{uuid.uuid4().hex[:8]}"
    timeout_s = 60 + options.jobs * 0.05  # one worker slot alone would drain it in that
    results: dict[str, Waits] = {}
    with ExitStack() as stack:
        stack.callback(delete_queues, BROKER, [queue])
        logs = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="bench-fairness-")))
        url = sqlalchemy_url(stack.enter_context(scratch_database("outcomes_fairness")))
        migrate(url)
        env = {
            "OUTCOMES_DATABASE_URL": url,
            "OUTCOMES_BROKER_URL": BROKER,
            "OUTCOMES_TOOLS": "bench.fairness_tools",
            "OUTCOMES_QUEUE": queue,
        }
        rounds = [("fair", options.window)] + ([("unfair", 0)] if options.unfair else [])
        for name, window in rounds:
            env["OUTCOMES_ACCOUNT_WINDOW"] = str(window)
            with ExitStack() as fleet:
                for k in range(WORKERS):
                    argv_k = ledger_worker_argv(POOL)
                    fleet.enter_context(running_worker(f"{name}{k}", argv_k, env, logs))
                ledger = fleet.enter_context(open_ledger(url, pool_size=SUBMITTERS))
                ledger.limits = Limits(window=window)
                settings = replace(
                    load_settings(), database_url=url, broker_url=BROKER, queue=queue
                )
                app = make_celery(settings)
                fleet.callback(app.close)
                dispatcher = CeleryDispatcher(app, queue)
                fleet.callback(dispatcher.close)
                outbox = Outbox(ledger, dispatcher)
                fleet.callback(outbox.close)
                run_round(ledger, outbox, 0, timeout_s)  # warm-up: workers ready, pools open
                if name == "fair":
                    results["idle"] = run_round(ledger, outbox, 0, timeout_s)
                results[f"loaded, {name}"] = run_round(ledger, outbox, options.jobs, timeout_s)
    return report(results, options)


def report(results: dict[str, Waits], options: argparse.Namespace) -> int:
    idle = results["idle"].p95
    ratio = results["loaded, fair"].p95 / idle if idle > 0 else float("inf")
    verdict = "met" if ratio <= GOAL else "NOT met"
    if options.json:
        figures = {k: {"p50_s": w.p50, "p95_s": w.p95} for k, w in results.items()}
        print(
            json.dumps(
                {
                    "jobs": options.jobs,
                    "window": options.window,
                    "rounds": figures,
                    "ratio_p95": ratio,
                    "goal": GOAL,
                    "met": ratio <= GOAL,
                }
            )
        )
        return 0
    rows = [
        [name, f"{1000 * w.p50:.0f}", f"{1000 * w.p95:.0f}", f"{w.p95 / idle:.1f}x"]
        for name, w in results.items()
    ]
    print(
        f"A: {options.jobs} jobs of a 50 ms tool, then B: {B_JOBS}; "
        f"{WORKERS} workers x {POOL.concurrency} threads; window {options.window}"
    )
    print(render_table(["B's wait, accept to start", "p50 ms", "p95 ms", "p95 / idle"], rows))
    print(
        f"goal: B's p95 with A's backlog <= {GOAL:g}x B's on an idle ledger: "
        f"{ratio:.1f}x -> {verdict}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

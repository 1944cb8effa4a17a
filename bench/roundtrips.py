"""Round trips and statements per recorded job, counted on the wire (libpq's protocol trace).

Run:  .venv/bin/python -m bench.roundtrips [--n 200] [--threads 16] [--json]

In this process, on a scratch Postgres database, each job is submitted (`submit`) and executed
(`Executor.execute`: claim, the no-op tool of bench/throughput_tools.py, the outcome), exactly
as the API and a worker do it, minus the broker. Every connection of the store's pool traces
its protocol messages; a round trip is one the client waits for (a simple `Query`, or a `Sync`
that ends an extended-protocol batch), a statement is one the server runs (`Query` or
`Execute`, BEGIN and COMMIT included).

Two ways, side by side in one run:
- batched   the path on Postgres: a submit and an outcome are one statement
            (`outcomes_append_jobs`) in its own transaction; a claim is one transaction
            (BEGIN, a read, the statement, COMMIT: it commits only if the worker is still
            there to ask); a worker's claims and outcomes join group commits, so with
            `--threads` concurrent jobs those serve a whole group;
- general   the path every store has (SQLite's, and Postgres for views written before
            `head_hash`): one SQLAlchemy transaction per write, read the head, insert, update
            the read model, each a round trip.

Goal: at most 4 round trips per job on the batched path, with a worker's 16 jobs at once
(`--threads`, the worker's default). Measured, not asserted.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from sqlalchemy import event

from bench._common import migrate, render_table, scratch_database
from bench._store import SqlStore, job_batch, sql_store
from bench.throughput_tools import NOOP_TOOL
from ledger.decisions import Caller, JobRequest
from ledger.runtime.ledger import Ledger
from ledger.services.execute import Executor
from ledger.services.submit import submit

GOAL = 4.0
TRACE_FLAGS = 1 | 2  # libpq: suppress timestamps, regress mode (one message per line)


@dataclass(frozen=True)
class Count:
    jobs: int
    round_trips: int
    statements: int

    def per_job(self) -> tuple[float, float]:
        return self.round_trips / self.jobs, self.statements / self.jobs


@contextmanager
def traced(store: SqlStore) -> Iterator[str]:
    """Trace every pooled connection's protocol into one file; yield its path."""
    handle, path = tempfile.mkstemp(prefix="bench-roundtrips-", suffix=".trace")

    def on_connect(dbapi_connection: Any, _record: Any) -> None:
        dbapi_connection.pgconn.trace(handle)
        dbapi_connection.pgconn.set_trace_flags(TRACE_FLAGS)

    store.engine.dispose()  # connections made from now on are traced
    event.listen(store.engine, "connect", on_connect)
    try:
        yield path
    finally:
        event.remove(store.engine, "connect", on_connect)
        store.engine.dispose()
        os.close(handle)


def count(path: str, since: int) -> tuple[int, int, int]:
    """(round trips, statements, bytes read) in the trace after byte `since`."""
    with open(path, "rb") as trace:
        trace.seek(since)
        data = trace.read()
    round_trips = statements = 0
    for line in data.decode(errors="replace").splitlines():
        parts = line.split("\t")
        if len(parts) < 3 or parts[0] != "F":
            continue
        kind = parts[2].split(" ", 1)[0]
        round_trips += kind in ("Query", "Sync")
        statements += kind in ("Query", "Execute")
    return round_trips, statements, since + len(data)


def run_jobs(ledger: Ledger, n: int, threads: int) -> None:
    caller = Caller(account="bench", token_id="bench-roundtrips")
    executor = Executor(ledger, "bench-worker")

    def one(i: int) -> None:
        job = submit(ledger, caller, JobRequest(NOOP_TOOL, {"seq": i})).view
        done = executor.execute(job.job_id)
        if done.event_type != "work.succeeded":
            raise RuntimeError(f"job {job.job_id}: {done}")

    def share(first: int) -> None:
        for i in range(first, n, threads):
            one(i)

    workers = [threading.Thread(target=share, args=(k,)) for k in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()


def measure(store: SqlStore, path: str, n: int, threads: int, general: bool) -> Count:
    saved = job_batch.fast
    if general:
        job_batch.fast = lambda item: False
    try:
        _, _, start = count(path, 0)
        run_jobs(Ledger(store), n, threads)
        round_trips, statements, _ = count(path, start)
    finally:
        job_batch.fast = saved
    return Count(n, round_trips, statements)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.roundtrips", description=__doc__)
    parser.add_argument("--n", type=int, default=200, help="jobs per measurement")
    parser.add_argument("--threads", type=int, default=16, help="concurrent jobs, second run")
    parser.add_argument("--json", action="store_true", help="print one JSON line, no table")
    options = parser.parse_args(argv)
    results: dict[str, Count] = {}
    with scratch_database("outcomes_rt") as url:
        migrate(url)
        with sql_store(url, pool_size=options.threads) as store, traced(store) as path:
            run_jobs(Ledger(store), 20, 1)  # warm-up: connections made, statements prepared
            for general in (False, True):
                for threads in (1, options.threads):
                    name = f"{'general' if general else 'batched'}, {threads} at once"
                    results[name] = measure(store, path, options.n, threads, general)
    if options.json:
        print(json.dumps({k: vars(v) for k, v in results.items()}))
        return 0
    rows = [
        [name, f"{c.per_job()[0]:.2f}", f"{c.per_job()[1]:.2f}", str(c.jobs)]
        for name, c in results.items()
    ]
    print(render_table(["path", "round trips/job", "statements/job", "jobs"], rows))
    best = results[f"batched, {options.threads} at once"].per_job()[0]
    single = results["batched, 1 at once"].per_job()[0]
    # A worker runs 16 jobs at once by default: that is the case the goal is judged on.
    print(
        f"\ngoal <= {GOAL:g} round trips per job (broker not counted), a worker's "
        f"{options.threads} jobs at once: {best:.2f} -> "
        + ("met" if best <= GOAL else "NOT met")
        + f" (one job at a time: {single:.2f}; a claim alone is read, BEGIN, append, COMMIT)"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

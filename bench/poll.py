"""Poll benchmark: `GET /v1/jobs/{id}` against a bare FastAPI endpoint, and long-poll wake-ups.

Run:  .venv/bin/python -m bench.poll [--requests 2000] [--rounds 6]
          [--concurrency 32] [--waiters 1000] [--database-url postgresql://...] [--json]

One uvicorn process on 127.0.0.1 (one worker, default settings, no access log) serves the
API built by `create_app` plus one extra route, `/bench/bare/{job_id}`: a plain FastAPI
endpoint doing one indexed SELECT of the jobs read model through the same store (same pool,
the same single-statement read as the API's, `quick_read`). The load generator is this
process: keep-alive HTTP/1.1 connections in asyncio.

1. Reads: `--rounds` rounds of `--requests` GETs per variant over `--concurrency`
   connections, interleaved (the bare endpoint first in even rounds) to cancel drift; both
   send the same bearer token. Reported: median requests/s, p99 latency, and the median of
   the rounds' ratios ours / bare (each round's pair ran back to back, so a shared machine's
   changing load cancels out of the ratio; goal >= 0.8x).
2. Wake-ups: `--waiters` long-polls (`?wait=60`) on as many running jobs; once the server
   holds them all, another thread records an outcome for each job, one every few ms, and the
   latency from the append returning (committed) to that job's answer arriving is taken.
   Reported: p50 / p99 / max (goal p99 <= 20 ms).

The jobs are made as the product makes them, in this process: submitted (`submit`, the no-op
tool of bench/throughput_tools.py), claimed (`claim`) and their outcomes recorded
(`record_outcome`) as a worker records them. Only the bare endpoint reads the store itself
(bench/_store.py): it is the floor the API's read is compared with.

Speed is measured, not asserted: the script exits 0 either way. Without --database-url a
scratch Postgres database `outcomes_bench_poll_<pid>` is created and dropped afterwards.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass

import uvicorn
from fastapi import FastAPI, HTTPException
from sqlalchemy import select

from api.app import create_app
from bench._common import exit_cleanly_on_sigterm, migrate, scratch_database, sqlalchemy_url
from bench._store import SqlReads, jobs
from bench.poll_report import BARE, OURS, ReadRun, percentile, print_table, report
from bench.throughput_tools import NOOP_TOOL
from ledger.decisions import Caller, JobRequest
from ledger.events import NewEvent, WorkSucceeded
from ledger.job_view import JobView
from ledger.runtime.ledger import Ledger, open_ledger
from ledger.services import tokens
from ledger.services.submit import submit
from ledger.services.work import ClaimResult, claim, record_outcome

SEEDED_JOBS = 200
PACE_S = 0.003  # between recorded outcomes: wake-ups are measured one by one, not as a queue
ACCOUNT, WORKER = "bench", "bench-poll:1"
LEASE_S = 600.0  # the running jobs outlive the run: no reconciler runs, but say it


@dataclass(frozen=True)
class Options:
    requests: int
    rounds: int
    concurrency: int
    waiters: int
    database_url: str | None
    as_json: bool


def parse_options(argv: Sequence[str] | None) -> Options:
    parser = argparse.ArgumentParser(
        prog="python -m bench.poll", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--requests", type=int, default=2000, help="GETs per variant per round")
    parser.add_argument("--rounds", type=int, default=6, help="timed rounds (median reported)")
    parser.add_argument("--concurrency", type=int, default=32, help="keep-alive connections")
    parser.add_argument("--waiters", type=int, default=1000, help="concurrent long-polls")
    parser.add_argument("--database-url", help="use this Postgres database, not a scratch one")
    parser.add_argument("--json", action="store_true", help="print one JSON line, no table")
    args = parser.parse_args(argv)
    # Bounded on purpose: this only ever loads 127.0.0.1, briefly.
    if not (1 <= args.requests <= 100_000 and 1 <= args.rounds <= 20):
        parser.error("--requests must be 1..100000 and --rounds 1..20")
    if not (1 <= args.concurrency <= 256 and 1 <= args.waiters <= 5000):
        parser.error("--concurrency must be 1..256 and --waiters 1..5000")
    return Options(
        args.requests, args.rounds, args.concurrency, args.waiters, args.database_url, args.json
    )


# --- the server (a child process) ------------------------------------------------------------


class NoDispatch:
    def dispatch(self, job_id: str, delay_s: float = 0.0) -> None:
        return None


def bench_app(ledger: Ledger) -> FastAPI:
    app = create_app(ledger, NoDispatch())

    @app.get("/bench/bare/{job_id}", include_in_schema=False)
    def bare(job_id: str) -> object:
        # The same connection discipline as the API's reads: one statement, one round trip.
        with ledger.store.quick_read() as reads:
            assert isinstance(reads, SqlReads)  # its connection, for a bare SELECT
            query = select(jobs.c.view).where(jobs.c.job_id == job_id)
            row = reads.conn.execute(query).first()
        if row is None:
            raise HTTPException(404)
        return row.view

    @app.get("/bench/waiters", include_in_schema=False)
    def waiters() -> dict[str, int]:
        return {"watching": app.state.api.waiter.watching}

    return app


def serve(database_url: str, port: int) -> None:
    raise_file_limit()
    uvicorn.run(
        bench_app(open_ledger(database_url)),
        host="127.0.0.1",
        port=port,
        log_level="warning",
        access_log=False,
        backlog=4096,
    )


def raise_file_limit() -> None:
    """A thousand waiters need a thousand sockets on each side."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, min(hard, 8192)), hard))


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def start_server(database_url: str) -> tuple[subprocess.Popen[bytes], int]:
    port = free_port()
    child = subprocess.Popen(
        [sys.executable, "-m", "bench.poll", "--serve", database_url, "--port", str(port)]
    )
    direct = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # never via a proxy
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            with direct.open(f"http://127.0.0.1:{port}/healthz", timeout=1) as answer:
                if answer.status == 200:
                    return child, port
        except OSError:  # not listening yet
            time.sleep(0.1)
    child.terminate()
    raise SystemExit("bench: the server did not come up")


# --- a minimal keep-alive HTTP/1.1 client (httpx would be the bottleneck) ----------------------


class Connection:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer

    @classmethod
    async def open(cls, port: int) -> Connection:
        reader, writer = await asyncio.open_connection("127.0.0.1", port, limit=1 << 20)
        return cls(reader, writer)

    async def get(self, path: str, token: str) -> tuple[int, bytes]:
        request = f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {token}\r\n"
        self.writer.write(request.encode() + b"\r\n")
        head = await self.reader.readuntil(b"\r\n\r\n")
        length = 0
        for line in head.split(b"\r\n"):
            if line[:15].lower() == b"content-length:":
                length = int(line[15:])
        body = await self.reader.readexactly(length)
        return int(head[9:12]), body

    def close(self) -> None:
        self.writer.close()


async def read_load(port: int, paths: list[str], token: str, n: int, conns: int) -> ReadRun:
    connections = [await Connection.open(port) for _ in range(conns)]
    latencies: list[float] = []
    counter = iter(range(n))

    async def worker(conn: Connection) -> None:
        for i in counter:
            begun = time.perf_counter()
            status, _ = await conn.get(paths[i % len(paths)], token)
            latencies.append(time.perf_counter() - begun)
            if status != 200:
                raise SystemExit(f"bench: {paths[i % len(paths)]} answered {status}")

    begun = time.perf_counter()
    await asyncio.gather(*(worker(c) for c in connections))
    elapsed = time.perf_counter() - begun
    for conn in connections:
        conn.close()
    return ReadRun(n / elapsed, percentile(latencies, 99) * 1000)


# --- the ledger side ----------------------------------------------------------------------------


def queued_jobs(ledger: Ledger, caller: Caller, n: int) -> list[str]:
    """`n` jobs submitted as the API submits them (no broker: nobody runs them)."""
    views = [submit(ledger, caller, JobRequest(NOOP_TOOL, {"seq": i})).view for i in range(n)]
    if not all(view.accepted for view in views):
        raise SystemExit("bench: a job was refused")
    return [view.job_id for view in views]


def running_jobs(ledger: Ledger, caller: Caller, n: int) -> list[JobView]:
    """`n` jobs submitted and claimed by a worker: their next change is their outcome."""
    running = []
    for job_id in queued_jobs(ledger, caller, n):
        claimed = claim(ledger, job_id, WORKER, LEASE_S)
        if claimed.result is not ClaimResult.CLAIMED or claimed.view is None:
            raise SystemExit(f"bench: job {job_id} not claimed: {claimed.reason}")
        running.append(claimed.view)
    return running


def record_outcomes(ledger: Ledger, running: list[JobView], done: dict[str, float]) -> None:
    for view in running:
        succeeded = WorkSucceeded(attempt=view.attempts, result={"n": 1})
        record_outcome(ledger, view, NewEvent(payload=succeeded, actor=WORKER))
        done[view.job_id] = time.perf_counter()  # committed: the waiter may answer from now on
        time.sleep(PACE_S)


async def wake_ups(port: int, ledger: Ledger, token: str, running: list[JobView]) -> list[float]:
    ids = [view.job_id for view in running]
    connections = [await Connection.open(port) for _ in ids]
    answered: dict[str, float] = {}
    done: dict[str, float] = {}

    async def wait_one(conn: Connection, job_id: str) -> None:
        status, body = await conn.get(f"/v1/jobs/{job_id}?wait=60", token)
        answered[job_id] = time.perf_counter()
        if status != 200 or json.loads(body)["status"] != "succeeded":
            raise SystemExit(f"bench: long-poll answered {status} {body[:200]!r}")

    polls = [asyncio.ensure_future(wait_one(c, j)) for c, j in zip(connections, ids, strict=True)]
    await until_watching(port, len(ids))
    writer = threading.Thread(target=record_outcomes, args=(ledger, running, done))
    writer.start()
    await asyncio.gather(*polls)
    writer.join()
    for conn in connections:
        conn.close()
    return [max(0.0, answered[j] - done[j]) * 1000 for j in ids]


async def until_watching(port: int, n: int) -> None:
    probe = await Connection.open(port)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        _, body = await probe.get("/bench/waiters", "-")
        if json.loads(body)["watching"] >= n:
            probe.close()
            return
        await asyncio.sleep(0.05)
    raise SystemExit("bench: the server never held every waiter")


# --- the run ------------------------------------------------------------------------------------


def run(options: Options, database_url: str) -> dict[str, object]:
    upgrade_url = sqlalchemy_url(database_url)
    migrate(upgrade_url)
    ledger = open_ledger(upgrade_url)
    issued = tokens.create(ledger, ACCOUNT, "agent", None, actor="bench")
    caller = Caller(account=ACCOUNT, token_id=issued.view.token_id)
    paths = {OURS: [f"/v1/jobs/{j}" for j in queued_jobs(ledger, caller, SEEDED_JOBS)]}
    paths[BARE] = [p.replace("/v1/jobs/", "/bench/bare/") for p in paths[OURS]]
    child, port = start_server(upgrade_url)
    try:
        reads = asyncio.run(read_rounds(options, port, paths, issued.token))
        running = running_jobs(ledger, caller, options.waiters)
        wakes = asyncio.run(wake_ups(port, ledger, issued.token, running))
    finally:
        child.terminate()
        child.wait(10)
        ledger.close()
    return report(reads, wakes)


async def read_rounds(
    options: Options, port: int, paths: dict[str, list[str]], token: str
) -> dict[str, list[ReadRun]]:
    for variant in (BARE, OURS):  # warm-up: pools, caches, JIT-free but not cold
        await read_load(
            port, paths[variant], token, min(500, options.requests), options.concurrency
        )
    runs: dict[str, list[ReadRun]] = {BARE: [], OURS: []}
    for round_no in range(options.rounds):
        order = (BARE, OURS) if round_no % 2 == 0 else (OURS, BARE)
        for variant in order:
            runs[variant].append(
                await read_load(port, paths[variant], token, options.requests, options.concurrency)
            )
    return runs


def main(argv: Sequence[str] | None = None) -> None:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["--serve"]:  # the child: python -m bench.poll --serve URL --port P
        serve(argv[1], int(argv[3]))
        return
    options = parse_options(argv)
    raise_file_limit()
    with exit_cleanly_on_sigterm():
        if options.database_url:
            result = run(options, options.database_url)
        else:
            with scratch_database("outcomes_bench_poll") as url:
                result = run(options, url)
    print(json.dumps(result) if options.as_json else "", end="\n" if options.as_json else "")
    if not options.as_json:
        print_table(result)


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    main()

"""Console benchmark: every console page against a ledger of 100k jobs, beside a bare endpoint.

Run:  .venv/bin/python -m bench.console [--jobs 100000] [--requests 40] [--database-url URL]

1. Fill: a scratch Postgres database `outcomes_bench_console_<pid>` (dropped afterwards; or
   --database-url) gets `--jobs` jobs through the store's own batched append
   (`Store.append_jobs`, one `outcomes_append_jobs` statement per 1000 jobs, bench/_store.py):
   each job's whole history (decision, start, outcome) sealed and folded as a worker would
   record it. The brakes and the auditor's token go through the use cases. The mix:
   succeeded, tool failures, refusals (some by brakes), OUTCOME_MISSING worker_lost on paid
   tools and never_started, and open jobs, over 10 accounts and 5 tools; 20 brakes, half
   released.
2. Serve: `outcomes serve --api-only` (a process of its own, uvicorn's defaults) on that
   database, and a bare FastAPI app (another process) whose one route returns a fixed 6 KB
   HTML page: the floor of an HTTP answer on this machine.
3. Time: signed in as an auditor of every account, each page `--requests` times in turn (after
   3 warm-up requests), one keep-alive connection: median and p95 in milliseconds, and the
   median's ratio to the bare endpoint's. The audit page is timed last: its first view starts
   a whole-ledger verification on a thread of the server, which runs on while it is timed.

Speed is measured, not asserted: the script exits 0 either way (goal: every page under 200 ms).
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta

import httpx
import uvicorn
from fastapi import FastAPI
from starlette.responses import HTMLResponse

from bench._common import (
    exit_cleanly_on_sigterm,
    migrate,
    render_table,
    scratch_database,
    sqlalchemy_url,
)
from bench._store import JobAppend
from bench.poll import free_port
from ledger.brakes import brake_error
from ledger.codes import Code, OutcomeMissingCause
from ledger.error_info import ErrorInfo
from ledger.events import (
    JobAccepted,
    JobOutcomeMissing,
    JobRefused,
    NewEvent,
    Payload,
    WorkFailed,
    WorkStarted,
    WorkSucceeded,
)
from ledger.runtime.ledger import Ledger, open_ledger
from ledger.services import brakes, tokens

BATCH = 1000
ACCOUNTS = tuple(f"acct-{i}" for i in range(10))
TOOLS = (
    "tracker.read_issue",
    "social.draw_card",
    "seo.keyword_sweep",
    "mail.send_release_note",
    "debug.spend_slowly",
)
FAILURES = (
    Code.ACCESS_DENIED,
    Code.SOURCE_UNRELIABLE,
    Code.REFERENCE_UNRESOLVED,
    Code.TOOL_CRASHED,
)
BARE_HTML = "<!doctype html><html><body>" + "<p>bare</p>" * 550 + "</body></html>"
GOAL_MS = 200.0


def _event(payload: Payload, actor: str = "bench") -> NewEvent:
    return NewEvent(payload=payload, actor=actor)


def _history(number: int, rng: random.Random, held: list[str]) -> list[NewEvent]:
    account, tool = ACCOUNTS[number % len(ACCOUNTS)], TOOLS[rng.randrange(len(TOOLS))]
    spends = tool != "tracker.read_issue"
    roll = rng.random()
    if roll < 0.06:  # refused at submit: a missing input, or held by a brake
        cause = held[number % len(held)] if roll < 0.02 else None
        error = ErrorInfo(
            code=Code.BRAKE_ENGAGED if cause else Code.INPUT_MISSING, message="refused", cause=cause
        )
        return [_event(JobRefused(account=account, tool=tool, error=error))]
    accepted = _event(
        JobAccepted(account=account, tool=tool, args={"ref": f"r-{number}"}, spends=spends)
    )
    if roll < 0.08:  # still queued
        return [accepted]
    if roll < 0.09:  # the reconciler never saw it start
        missing = ErrorInfo(
            code=Code.OUTCOME_MISSING, message="never started", cause="never_started"
        )
        lost = JobOutcomeMissing(attempt=0, cause=OutcomeMissingCause.NEVER_STARTED, error=missing)
        return [accepted, _event(lost, "reconciler")]
    lease = datetime.now(UTC) + timedelta(seconds=30)
    started = _event(
        WorkStarted(attempt=1, worker="bench:1", lease_expires_at=lease), "worker:bench:1"
    )
    if roll < 0.11:
        return [accepted, started]  # running
    if roll < 0.14:  # the worker vanished
        missing = ErrorInfo(code=Code.OUTCOME_MISSING, message="worker lost", cause="worker_lost")
        lost = JobOutcomeMissing(attempt=1, cause=OutcomeMissingCause.WORKER_LOST, error=missing)
        return [accepted, started, _event(lost, "reconciler")]
    if roll < 0.24:
        error = ErrorInfo(code=FAILURES[number % len(FAILURES)], message="the tool failed")
        return [accepted, started, _event(WorkFailed(attempt=1, error=error), "worker:bench:1")]
    return [
        accepted,
        started,
        _event(WorkSucceeded(attempt=1, result={"n": number}), "worker:bench:1"),
    ]


def fill(ledger: Ledger, jobs: int, seed: int = 7) -> tuple[list[str], str]:
    """`jobs` jobs and 20 brakes (half released); returns some job ids and an auditor token."""
    pulled = [
        brakes.pull(ledger, f"tool:{TOOLS[i % len(TOOLS)]}", f"bench brake {i}", "bench")
        for i in range(20)
    ]
    for brake in pulled[::2]:
        brakes.release(ledger, brake.brake_id, "bench: released", "bench")
    rng = random.Random(seed)
    held = [brake_error(b).cause or "" for b in pulled]
    sample: list[str] = []
    started = time.perf_counter()
    for first in range(0, jobs, BATCH):
        items = []
        for number in range(first, min(first + BATCH, jobs)):
            job_id = str(uuid.uuid4())
            items.append(JobAppend(job_id, _history(number, rng, held), None, notify=False))
            if number % 997 == 0:
                sample.append(job_id)
        ledger.store.append_jobs(items)
        if first and first % 20_000 == 0:
            print(f"  {first} jobs in {time.perf_counter() - started:.0f} s", file=sys.stderr)
    token = tokens.create(ledger, "*", "auditor", None, "bench").token
    return sample, token


def bare_app() -> FastAPI:
    app = FastAPI()

    @app.get("/bare")
    async def bare() -> HTMLResponse:
        return HTMLResponse(BARE_HTML)

    return app


@contextmanager
def process(argv: list[str], env: dict[str, str], url: str) -> Iterator[None]:
    server = subprocess.Popen(
        argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True
    )
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                httpx.get(url, timeout=2)
                break
            except httpx.TransportError:
                if server.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"{argv} did not start") from None
                time.sleep(0.2)
        yield
    finally:
        server.terminate()
        server.wait(timeout=20)


def timings(client: httpx.Client, path: str, requests: int) -> list[float]:
    for _ in range(3):
        client.get(path).raise_for_status()
    found = []
    for _ in range(requests):
        started = time.perf_counter()
        answer = client.get(path)
        found.append((time.perf_counter() - started) * 1000)
        answer.raise_for_status()
        if answer.url.path.endswith("/sign-in") and not path.endswith("/sign-in"):
            raise RuntimeError(f"{path}: not signed in")
    return found


def p95(values: list[float]) -> float:
    return sorted(values)[max(int(len(values) * 0.95) - 1, 0)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=100_000)
    parser.add_argument("--requests", type=int, default=40)
    parser.add_argument("--database-url")
    options = parser.parse_args()
    with exit_cleanly_on_sigterm(), _database(options.database_url) as url:
        migrate(url)
        with open_ledger(sqlalchemy_url(url)) as ledger:
            started = time.perf_counter()
            sample, token = fill(ledger, options.jobs)
            print(
                f"filled {options.jobs} jobs in {time.perf_counter() - started:.0f} s",
                file=sys.stderr,
            )
        run(url, sample, token, options.requests, options.jobs)


@contextmanager
def _database(url: str | None) -> Iterator[str]:
    if url:
        yield url
        return
    with scratch_database("outcomes_bench_console") as scratch:
        yield scratch


def run(url: str, sample: list[str], token: str, requests: int, jobs: int) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OUTCOMES_")}
    env |= {"OUTCOMES_DATABASE_URL": sqlalchemy_url(url), "OUTCOMES_TOOLS": "examples.seed_tools"}
    api_port, bare_port = free_port(), free_port()
    api = f"http://127.0.0.1:{api_port}"
    bare = f"http://127.0.0.1:{bare_port}"
    serve = [sys.executable, "-m", "cli", "serve", "--api-only", "--port", str(api_port)]
    floor = [sys.executable, "-m", "bench.console", "--bare-server", str(bare_port)]
    with process(serve, env, f"{api}/healthz"), process(floor, env, f"{bare}/bare"):
        with httpx.Client(base_url=bare) as client:
            baseline = timings(client, "/bare", requests)
        with httpx.Client(base_url=api, timeout=30) as stranger:
            signing_in = timings(stranger, "/console/sign-in", requests)
        with httpx.Client(base_url=api, follow_redirects=True, timeout=30) as client:
            client.post("/console/sign-in", data={"token": token}).raise_for_status()
            older = (
                client.get("/console/jobs")
                .text.split('rel="next"')[0]
                .rsplit('href="/console/jobs?', 1)[1]
                .split('"')[0]
            )
            pages = [
                "/console/jobs",
                "/console/jobs?status=failed",
                "/console/jobs?code=OUTCOME_MISSING",
                "/console/jobs?code=BRAKE_ENGAGED",
                "/console/jobs?tool=debug.spend_slowly&account=acct-3",
                "/console/jobs?" + older.replace("&amp;", "&"),
                "/console/jobs?since=2000-01-01T00:00&until=2001-01-01T00:00",
                "/console/jobs/rows",
                f"/console/jobs/{sample[len(sample) // 2]}",
                "/console/silence",
                "/console/silence?window=30d",
                "/console/brakes",
                "/console/audit",  # last: it starts a whole-ledger verification on the server
            ]
            found = {"/console/sign-in": signing_in}
            found |= {page: timings(client, page, requests) for page in pages}
    floor_ms = statistics.median(baseline)
    rows = [
        ["bare FastAPI endpoint (6 KB HTML)", f"{floor_ms:.1f}", f"{p95(baseline):.1f}", "1.0x", ""]
    ]
    for page, values in found.items():
        median = statistics.median(values)
        verdict = "ok" if p95(values) < GOAL_MS else "OVER"
        rows.append(
            [page, f"{median:.1f}", f"{p95(values):.1f}", f"{median / floor_ms:.1f}x", verdict]
        )
    print(f"\nconsole pages, {jobs} jobs on PostgreSQL, {requests} requests each (ms):")
    print(render_table(["page", "median", "p95", "vs bare", f"p95<{GOAL_MS:.0f}"], rows))


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--bare-server":
        uvicorn.run(
            bare_app(),
            host="127.0.0.1",
            port=int(sys.argv[2]),
            log_level="warning",
            access_log=False,
        )
    else:
        main()

"""HTTP benchmark: jobs submitted over HTTP by concurrent clients and followed to their terminal
envelope, beside bare Celery running the same no-op from as many threads.

Run:  .venv/bin/python -m bench.http [--n 1000] [--clients 16] [--rounds 3] [--json]

- ours         `outcomes serve --api-only` (uvicorn) and one `outcomes worker` (threads pool,
               16), on a scratch Postgres and RabbitMQ. Each client thread (one keep-alive
               connection each) POSTs /v1/jobs and long-polls GET /v1/jobs/{id}?wait=30 until
               the envelope is terminal, then takes its next job. Done when every client has
               every envelope: each decision, claim and outcome recorded and read back.
- bare_celery  the no-op as a plain Celery task (bench/throughput_tasks.py, no result backend)
               sent by as many threads, one `celery worker` (threads pool, same size); done
               when every task has run (a counter file).

The report gives each side's jobs/s over the same `--n`, the median of `--rounds`, and the
ratio. Goal: ours >= 0.4x bare Celery. Speed is measured here, not asserted: the script prints
whether the goal was met and exits 0 either way.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from pathlib import Path

import httpx

from bench._common import migrate, render_table, scratch_database, sql_store, sqlalchemy_url
from bench.poll import free_port
from bench.throughput_tasks import BROKER_ENV, COUNTER_ENV, NOOP_TASK, QUEUE_ENV, make_app
from bench.throughput_tools import NOOP_TOOL
from bench.throughput_workers import (
    REPO,
    Pool,
    baseline_worker_argv,
    delete_queues,
    ledger_worker_argv,
    running_worker,
    worker_env,
)
from ledger.services import tokens
from ledger.services.ledger import Ledger

GOAL = 0.4
BROKER = os.environ.get("OUTCOMES_BENCH_BROKER_URL", "amqp://guest:guest@127.0.0.1:5672//")
TOOLS = "bench.throughput_tools"
POOL = Pool("threads", 16, "WARNING")


def in_threads(n: int, threads: int, one: Callable[[int], None]) -> float:
    """Seconds to run `one(i)` for every i < n from `threads` threads (slices of the range)."""
    failures: list[BaseException] = []

    def share(first: int) -> None:
        try:
            for i in range(first, n, threads):
                one(i)
        except BaseException as exc:
            failures.append(exc)

    workers = [threading.Thread(target=share, args=(k,)) for k in range(threads)]
    started = time.perf_counter()
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    if failures:
        raise failures[0]
    return time.perf_counter() - started


@contextmanager
def api_server(env: dict[str, str], logs: Path) -> Iterator[str]:
    port = free_port()
    argv = [str(Path(sys.executable).parent / "outcomes"), "serve", "--api-only"]
    with open(logs / "api.log", "wb") as log:
        child = subprocess.Popen(
            [*argv, "--port", str(port)],
            cwd=REPO,
            env=worker_env(env),
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                if httpx.get(f"{base}/readyz", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if child.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the API did not start: {(logs / 'api.log').read_text()}")
            time.sleep(0.05)  # polling the server's own readiness endpoint
        yield base
    finally:
        child.terminate()
        child.wait(timeout=15)


def ours_round(base: str, token: str, n: int, clients: int) -> float:
    local = threading.local()
    headers = {"Authorization": f"Bearer {token}"}

    def one(i: int) -> None:
        client = getattr(local, "client", None)
        if client is None:
            client = local.client = httpx.Client(base_url=base, headers=headers, timeout=60)
        answer = client.post("/v1/jobs", json={"tool": NOOP_TOOL, "args": {"seq": i}})
        if answer.status_code != 202:
            raise RuntimeError(f"submit: {answer.status_code} {answer.text}")
        poll = answer.json()["poll_url"]
        while not (envelope := client.get(poll, params={"wait": 30}).json())["terminal"]:
            pass
        if envelope["status"] != "succeeded":
            raise RuntimeError(f"job {envelope['job_id']}: {envelope['status']}")

    return in_threads(n, clients, one)


def bare_round(queue: str, counter: Path, n: int, clients: int) -> float:
    app = make_app(BROKER, queue)
    before = counter.stat().st_size if counter.exists() else 0
    try:
        started = time.perf_counter()
        in_threads(n, clients, lambda i: app.send_task(NOOP_TASK, args=[i], queue=queue))
        while not counter.exists() or counter.stat().st_size < before + n:
            time.sleep(0.005)  # the baseline has no outcome to wait on: its counter file
        return time.perf_counter() - started
    finally:
        app.close()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.http", description=__doc__)
    parser.add_argument("--n", type=int, default=1000, help="jobs per round per side")
    parser.add_argument("--clients", type=int, default=16, help="concurrent client threads")
    parser.add_argument("--rounds", type=int, default=3, help="timed rounds (median reported)")
    parser.add_argument("--json", action="store_true", help="print one JSON line, no table")
    options = parser.parse_args(argv)
    run = uuid.uuid4().hex[:8]
    queues = {"ours": f"bench-http-ours-{run}", "bare": f"bench-http-bare-{run}"}
    seconds: dict[str, list[float]] = {"ours": [], "bare_celery": []}
    with ExitStack() as stack:
        stack.callback(delete_queues, BROKER, list(queues.values()))
        logs = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="bench-http-")))
        url = sqlalchemy_url(stack.enter_context(scratch_database("outcomes_http")))
        migrate(url)
        with Ledger(sql_store(url, pool_size=1)) as ledger:
            token = tokens.create(ledger, "bench", "agent", None, "bench-http").token
        env = {
            "OUTCOMES_DATABASE_URL": url,
            "OUTCOMES_BROKER_URL": BROKER,
            "OUTCOMES_TOOLS": TOOLS,
            "OUTCOMES_QUEUE": queues["ours"],
        }
        stack.enter_context(running_worker("ours", ledger_worker_argv(POOL), env, logs))
        base = stack.enter_context(api_server(env, logs))
        counter = logs / "bare.counter"
        bare_env = {BROKER_ENV: BROKER, QUEUE_ENV: queues["bare"], COUNTER_ENV: str(counter)}
        bare_argv = baseline_worker_argv(POOL, queues["bare"], f"bench-http-{run}")
        stack.enter_context(running_worker("bare", bare_argv, bare_env, logs))
        ours_round(base, token, 50, options.clients)  # warm-up: the worker is ready
        bare_round(queues["bare"], counter, 50, options.clients)
        for number in range(options.rounds):
            order = ["ours", "bare_celery"] if number % 2 == 0 else ["bare_celery", "ours"]
            for name in order:
                if name == "ours":
                    took = ours_round(base, token, options.n, options.clients)
                else:
                    took = bare_round(queues["bare"], counter, options.n, options.clients)
                seconds[name].append(took)
    rates = {name: options.n / statistics.median(s) for name, s in seconds.items()}
    ratio = rates["ours"] / rates["bare_celery"]
    if options.json:
        print(
            json.dumps({"rates": rates, "ratio": ratio, "n": options.n, "clients": options.clients})
        )
        return 0
    rows = [
        [name, f"{options.n / max(s):,.0f}", f"{rates[name]:,.0f}", f"{options.n / min(s):,.0f}"]
        for name, s in seconds.items()
    ]
    print(
        f"http benchmark: {options.rounds} rounds x {options.n} jobs, {options.clients} clients;"
        f" worker pool {POOL.kind}, concurrency {POOL.concurrency}"
    )
    print(render_table(["variant", "jobs/s min", "median", "max"], rows))
    verdict = "met" if ratio >= GOAL else "NOT met"
    print(f"\nours / bare_celery: {ratio:.2f}x (goal >= {GOAL}x) -> {verdict}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

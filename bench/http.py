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

- fastapi_celery the HTTP peer (bench/http_peer.py): FastAPI on uvicorn sending the same task
               to a `celery worker` like bare_celery's, with Celery's Redis result backend; the
               same clients POST /jobs and long-poll GET /jobs/{id}?wait=30 until the result is
               in Redis. No ledger: what any HTTP service reporting each job's end must pay
               (two requests per job, a result stored and read back), on the same machine.

The report gives each variant's jobs/s over the same `--n`, the median of `--rounds`, and the
ratios, and the CPU per job of ours' API process and of the peer's server (from /proc, over
the timed rounds). Goals: ours >= 0.4x bare Celery; ours >= 0.6x the HTTP peer with the API's
CPU <= 1.6 ms a job (issue 25). Ours beside the HTTP peer says how much of the gap the HTTP
round trips themselves cost here. Speed is measured here, not asserted: the script prints
whether each goal was met and exits 0 either way.
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
from contextlib import AbstractContextManager, ExitStack, contextmanager, nullcontext
from pathlib import Path

import httpx

from bench._common import migrate, render_table, scratch_database, sqlalchemy_url
from bench.poll import free_port
from bench.throughput_tasks import (
    BACKEND_ENV,
    BROKER_ENV,
    COUNTER_ENV,
    NOOP_TASK,
    QUEUE_ENV,
    make_app,
)
from bench.throughput_tools import NOOP_TOOL
from bench.throughput_workers import (
    REPO,
    CpuMeter,
    Pool,
    baseline_worker_argv,
    delete_queues,
    ledger_worker_argv,
    running_worker,
    worker_env,
)
from ledger.runtime.ledger import open_ledger
from ledger.services import tokens

GOAL = 0.4  # ours' jobs/s at least this share of bare Celery's
GOAL_PEER = 0.6  # ... and of the HTTP peer's
GOAL_API_CPU_MS = 1.6  # ours' API process: CPU per job at most this
OURS, BARE, PEER = "ours", "bare_celery", "fastapi_celery"
BROKER = os.environ.get("OUTCOMES_BENCH_BROKER_URL", "amqp://guest:guest@127.0.0.1:5672//")
REDIS = os.environ.get("OUTCOMES_BENCH_REDIS_URL", "redis://127.0.0.1:6379/0")
TOOLS = "bench.throughput_tools"
POOL = Pool("threads", 16, "WARNING")
FOLLOW: dict[str, str | int] = {
    "wait": 30,
    "until": "terminal",
}  # one long-poll per job, to its end


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
def http_server(
    name: str, argv: list[str], env: dict[str, str], logs: Path
) -> Iterator[tuple[str, int]]:
    """Run `argv --port P` (a uvicorn server) until it answers /readyz; yield its base URL
    and its pid."""
    port = free_port()
    log_path = logs / f"{name}.log"
    with open(log_path, "wb") as log:
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
                raise RuntimeError(f"{name} did not start: {log_path.read_text()}")
            time.sleep(0.05)  # polling the server's own readiness endpoint
        yield base, child.pid
    finally:
        child.terminate()
        child.wait(timeout=15)


def api_server(env: dict[str, str], logs: Path) -> AbstractContextManager[tuple[str, int]]:
    """`outcomes serve --api-only`: ours (its base URL and pid)."""
    argv = [str(Path(sys.executable).parent / "outcomes"), "serve", "--api-only"]
    return http_server("api", argv, env, logs)


def peer_server(env: dict[str, str], logs: Path) -> AbstractContextManager[tuple[str, int]]:
    """bench/http_peer.py under uvicorn: the HTTP peer."""
    argv = [sys.executable, "-m", "uvicorn", "bench.http_peer:app", "--log-level", "warning"]
    return http_server("peer", argv, env, logs)


def follow_round(
    base: str, headers: dict[str, str], path: str, n: int, clients: int, succeeded: str
) -> float:
    """Seconds for `clients` threads (one keep-alive connection each) to submit `n` no-op jobs
    to `base + path`, each followed by long-polls until its envelope is terminal."""
    local = threading.local()

    def one(i: int) -> None:
        client = getattr(local, "client", None)
        if client is None:
            client = local.client = httpx.Client(base_url=base, headers=headers, timeout=60)
        answer = client.post(path, json={"tool": NOOP_TOOL, "args": {"seq": i}})
        if answer.status_code != 202:
            raise RuntimeError(f"submit: {answer.status_code} {answer.text}")
        poll = answer.json()["poll_url"]
        while not (envelope := client.get(poll, params=FOLLOW).json())["terminal"]:
            pass
        if envelope["status"] != succeeded:
            raise RuntimeError(f"job {envelope['job_id']}: {envelope['status']}")

    return in_threads(n, clients, one)


def ours_round(base: str, token: str, n: int, clients: int) -> float:
    headers = {"Authorization": f"Bearer {token}"}
    return follow_round(base, headers, "/v1/jobs", n, clients, "succeeded")


def peer_round(base: str, n: int, clients: int) -> float:
    return follow_round(base, {}, "/jobs", n, clients, "success")


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
    queues = {name: f"bench-http-{name}-{run}" for name in ("ours", "bare", "peer")}
    seconds: dict[str, list[float]] = {OURS: [], BARE: [], PEER: []}
    with ExitStack() as stack:
        stack.callback(delete_queues, BROKER, list(queues.values()))
        logs = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="bench-http-")))
        url = sqlalchemy_url(stack.enter_context(scratch_database("outcomes_http")))
        migrate(url)
        with open_ledger(url, pool_size=1) as ledger:
            token = tokens.create(ledger, "bench", "agent", None, "bench-http").token
        env = {
            "OUTCOMES_DATABASE_URL": url,
            "OUTCOMES_BROKER_URL": BROKER,
            "OUTCOMES_TOOLS": TOOLS,
            "OUTCOMES_QUEUE": queues["ours"],
        }
        stack.enter_context(running_worker("ours", ledger_worker_argv(POOL), env, logs))
        base, api_pid = stack.enter_context(api_server(env, logs))
        counter = logs / "bare.counter"
        bare_env = {BROKER_ENV: BROKER, QUEUE_ENV: queues["bare"], COUNTER_ENV: str(counter)}
        bare_argv = baseline_worker_argv(POOL, queues["bare"], f"bench-http-{run}")
        stack.enter_context(running_worker("bare", bare_argv, bare_env, logs))
        peer_env = {BROKER_ENV: BROKER, QUEUE_ENV: queues["peer"], BACKEND_ENV: REDIS}
        peer_argv = baseline_worker_argv(POOL, queues["peer"], f"bench-http-peer-{run}")
        stack.enter_context(running_worker("peer_worker", peer_argv, peer_env, logs))
        peer, peer_pid = stack.enter_context(peer_server(peer_env, logs))
        rounds: dict[str, Callable[[int], float]] = {
            OURS: lambda n: ours_round(base, token, n, options.clients),
            BARE: lambda n: bare_round(queues["bare"], counter, n, options.clients),
            PEER: lambda n: peer_round(peer, n, options.clients),
        }
        servers = {OURS: CpuMeter(api_pid), PEER: CpuMeter(peer_pid)}  # what rounds cost them
        for run_round in rounds.values():
            run_round(50)  # warm-up: every worker and server is ready
        names = list(rounds)
        for number in range(options.rounds):
            # Each round a different variant goes first: drift hits them all alike.
            for name in names[number % 3 :] + names[: number % 3]:
                meter = servers.get(name)
                with meter.timing() if meter is not None else nullcontext():
                    seconds[name].append(rounds[name](options.n))
    jobs = options.n * options.rounds
    cpu_ms = {name: meter.ms_per(jobs) for name, meter in servers.items()}
    return report(seconds, cpu_ms, options)


def report(
    seconds: dict[str, list[float]], cpu_ms: dict[str, float | None], options: argparse.Namespace
) -> int:
    """Print the rates, the ratios and each goal (or one JSON line); exit status 0."""
    rates = {name: options.n / statistics.median(s) for name, s in seconds.items()}
    ratio = rates[OURS] / rates[BARE]
    to_peer = rates[OURS] / rates[PEER]
    if options.json:
        document = {
            "rates": rates,
            "ratio": ratio,
            "ours_to_peer": to_peer,
            "server_cpu_ms_per_job": cpu_ms,
            "n": options.n,
            "clients": options.clients,
        }
        print(json.dumps(document))
        return 0
    rows = [
        [
            name,
            f"{options.n / max(s):,.0f}",
            f"{rates[name]:,.0f}",
            f"{options.n / min(s):,.0f}",
            _ms(cpu_ms.get(name)),
        ]
        for name, s in seconds.items()
    ]
    print(
        f"http benchmark: {options.rounds} rounds x {options.n} jobs, {options.clients} clients;"
        f" worker pool {POOL.kind}, concurrency {POOL.concurrency}"
    )
    headers = ["variant", "jobs/s min", "median", "max", "server CPU/job"]
    print(render_table(headers, rows))
    print(f"\nours / {BARE}: {ratio:.2f}x (goal >= {GOAL}x) -> {_met(ratio >= GOAL)}")
    print(
        f"ours / {PEER} (the HTTP peer, no ledger): {to_peer:.2f}x (goal >= {GOAL_PEER}x)"
        f" -> {_met(to_peer >= GOAL_PEER)}"
    )
    api = cpu_ms.get(OURS)
    if api is None:
        print("ours' API CPU per job: not measured (its process is not visible here)")
    else:
        met = _met(api <= GOAL_API_CPU_MS)
        print(f"ours' API CPU per job: {api:.2f} ms (goal <= {GOAL_API_CPU_MS} ms) -> {met}")
    print(f"{PEER} / {BARE}: {rates[PEER] / rates[BARE]:.2f}x (what HTTP alone costs here)")
    return 0


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f} ms"


def _met(met: bool) -> str:
    return "met" if met else "NOT met"


if __name__ == "__main__":
    raise SystemExit(main())

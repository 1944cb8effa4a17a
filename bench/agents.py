"""Agents benchmark: the closed loop agents run — call a tool, wait for its outcome, call the
next — timed call by call, beside procrastinate (the durable peer) and bare Celery with a
Redis result backend doing the same.

Run:  .venv/bin/python -m bench.agents [--agents 1,16] [--calls 400] [--rounds 3] [--json]

- ours   `outcomes serve --api-only` (uvicorn) and two `outcomes worker`s (threads pool, 8
         each) on a scratch Postgres and RabbitMQ. Each agent (a thread, one keep-alive
         connection) POSTs /v1/jobs for the no-op tool and long-polls
         `GET /v1/jobs/{id}?wait=30&until=terminal` until the envelope is terminal, then makes
         its next call. A call's latency is from the POST to the terminal envelope.
- bare   the same no-op as a plain Celery task on two `celery worker`s (same pool), with
         Celery's Redis result backend: each agent calls `send_task(...).get()`. No ledger,
         no HTTP: what a tool call costs at the least on this machine.
- procrastinate  two `procrastinate worker`s (LISTEN/NOTIFY, concurrency 8) on a scratch
         database of the same Postgres; each agent defers the no-op and polls its job's row
         (bench/agents_procrastinate.py). Durable, like ours.

For each number of agents (`--agents`, comma-separated) it runs `--calls` calls per round
spread over the agents, `--rounds` rounds with the two sides in turns, and reports latency p50
and p99 over every call of every round, calls/s (the median round) and the ratios; also the API
process's CPU per call. Goals (issue 25): 1 agent p50 <= 3x bare; 16 agents calls/s >= 0.5x
bare with p99 <= 2x bare's. Speed is measured, not asserted: it prints whether each goal was
met and exits 0 either way. Against procrastinate (issue 48): 16 agents calls/s >= 1.0x its
and p99 <= 1.0x its; 1 agent p50 <= 1.3x its.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from contextlib import ExitStack, nullcontext
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from bench._common import (
    durable_commit_ms,
    migrate,
    percentile,
    render_table,
    scratch_database,
    sqlalchemy_url,
)
from bench.agents_phases import TAIL, Timed, phases
from bench.agents_procrastinate import ProcrastinateAgents, apply_schema, running_workers
from bench.agents_rows import RowsMeter, rows_json, rows_lines
from bench.http import BROKER, REDIS, api_server
from bench.throughput_tasks import BACKEND_ENV, BROKER_ENV, NOOP_TASK, QUEUE_ENV, make_app
from bench.throughput_tools import NOOP_TOOL
from bench.throughput_workers import (
    CpuMeter,
    Pool,
    baseline_worker_argv,
    delete_queues,
    ledger_worker_argv,
    running_worker,
)
from ledger.runtime.ledger import open_ledger
from ledger.services import tokens

OURS, BARE, PEER = "ours", "bare_celery_redis", "procrastinate"
POOL = Pool("threads", 8, "WARNING")
WORKERS = 2
GOAL_P50_1 = 3.0  # one agent: ours' p50 at most this many times bare's
GOAL_RATE_16 = 0.5  # sixteen agents: calls/s at least this share of bare's
GOAL_P99_16 = 2.0  # ... with p99 at most this many times bare's
PEER_GOALS = (  # against procrastinate: (agents, figure, sense, goal)
    (1, "p50_ms", "<=", 1.3),
    (16, "calls_per_s", ">=", 1.0),
    (16, "p99_ms", "<=", 1.0),
)


@dataclass
class Side:
    latencies: list[float] = field(default_factory=list)  # seconds, every call of every round
    rounds: list[float] = field(default_factory=list)  # seconds per round

    def rate(self, calls: int) -> float:
        return calls / statistics.median(self.rounds)

    def percentile(self, q: float) -> float:
        return percentile(self.latencies, q)


def closed_loop(
    calls: int, agents: int, call: Callable[[int, int], None]
) -> tuple[float, list[float]]:
    """`agents` threads make `calls` calls between them, each waiting for its call's end
    before the next; the round's seconds and every call's latency."""
    latencies: list[float] = []
    failures: list[BaseException] = []
    lock = threading.Lock()

    def agent(number: int) -> None:
        mine: list[float] = []
        try:
            for i in range(number, calls, agents):
                begun = time.perf_counter()
                call(number, i)
                mine.append(time.perf_counter() - begun)
        except BaseException as exc:
            failures.append(exc)
        with lock:
            latencies.extend(mine)

    threads = [threading.Thread(target=agent, args=(k,)) for k in range(agents)]
    started = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if failures:
        raise failures[0]
    return time.perf_counter() - started, latencies


class OursAgents:
    """Agents over HTTP: POST, then long-polls until terminal (one GET when all goes well)."""

    def __init__(self, base: str, token: str, agents: int) -> None:
        headers = {"Authorization": f"Bearer {token}"}
        self._clients = [
            httpx.Client(base_url=base, headers=headers, timeout=60) for _ in range(agents)
        ]
        self.timed: list[Timed] = []  # every call, for the phases (list.append is atomic)

    def call(self, agent: int, i: int) -> None:
        client = self._clients[agent]
        posted = time.time()
        answer = client.post("/v1/jobs", json={"tool": NOOP_TOOL, "args": {"seq": i}})
        answered = time.time()
        if answer.status_code != 202:
            raise RuntimeError(f"submit: {answer.status_code} {answer.text}")
        poll = answer.json()["poll_url"]
        params: dict[str, str | int] = {"wait": 30, "until": "terminal"}
        while not (envelope := client.get(poll, params=params).json())["terminal"]:
            pass
        if envelope["status"] != "succeeded":
            raise RuntimeError(f"job {envelope['job_id']}: {envelope['status']}")
        self.timed.append(Timed(envelope["job_id"], posted, answered, time.time()))

    def close(self) -> None:
        for client in self._clients:
            client.close()


class BareAgents:
    def __init__(self, queue: str) -> None:
        self._app = make_app(BROKER, queue, REDIS)
        self._queue = queue

    def call(self, agent: int, i: int) -> None:
        self._app.send_task(NOOP_TASK, args=[i], queue=self._queue).get(timeout=30)

    def close(self) -> None:
        self._app.close()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.agents", description=__doc__)
    parser.add_argument("--agents", default="1,16", help="numbers of agents, comma-separated")
    parser.add_argument("--calls", type=int, default=400, help="calls per round")
    parser.add_argument("--rounds", type=int, default=3, help="timed rounds per side")
    parser.add_argument("--json", action="store_true", help="print one JSON line, no table")
    options = parser.parse_args(argv)
    counts = [int(part) for part in options.agents.split(",") if part.strip()]
    run = uuid.uuid4().hex[:8]
    queues = {OURS: f"bench-agents-ours-{run}", BARE: f"bench-agents-bare-{run}"}
    results: dict[int, dict[str, Side]] = {}
    api_cpu_ms: dict[int, float | None] = {}
    split: dict[int, dict[str, float]] = {}
    tail: dict[int, dict[str, float]] = {}
    with ExitStack() as stack:
        stack.callback(delete_queues, BROKER, list(queues.values()))
        logs = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="bench-agents-")))
        url = sqlalchemy_url(stack.enter_context(scratch_database("outcomes_agents")))
        migrate(url)
        with open_ledger(url, pool_size=1) as ledger:
            token = tokens.create(ledger, "bench", "agent", None, "bench-agents").token
        # Each side's rows are read once its processes stopped (callbacks run last-in,
        # first-out), before its database is dropped.
        rows = {OURS: RowsMeter(url).start()}
        stack.callback(rows[OURS].finish)
        env = {
            "OUTCOMES_DATABASE_URL": url,
            "OUTCOMES_BROKER_URL": BROKER,
            "OUTCOMES_TOOLS": "bench.throughput_tools",
            "OUTCOMES_QUEUE": queues[OURS],
        }
        for k in range(WORKERS):
            stack.enter_context(running_worker(f"ours{k}", ledger_worker_argv(POOL), env, logs))
        base, api_pid = stack.enter_context(api_server(env, logs))
        bare_env = {BROKER_ENV: BROKER, QUEUE_ENV: queues[BARE], BACKEND_ENV: REDIS}
        for k in range(WORKERS):
            bare_argv = baseline_worker_argv(POOL, queues[BARE], f"bench-agents-{run}-{k}")
            stack.enter_context(running_worker(f"bare{k}", bare_argv, bare_env, logs))
        peer_dsn = stack.enter_context(scratch_database("outcomes_agents_peer"))
        apply_schema(peer_dsn)
        rows[PEER] = RowsMeter(peer_dsn).start()
        stack.callback(rows[PEER].finish)
        stack.enter_context(running_workers(peer_dsn, WORKERS, logs))
        for agents in counts:
            ours = OursAgents(base, token, agents)
            bare = BareAgents(queues[BARE])
            peer = ProcrastinateAgents(peer_dsn, agents)
            try:
                sides = {OURS: Side(), BARE: Side(), PEER: Side()}
                calls = {OURS: ours.call, BARE: bare.call, PEER: peer.call}
                for name in sides:  # warm-up: connections open, workers ready
                    closed_loop(4 * agents, agents, calls[name])
                for meter in rows.values():
                    meter.calls += 4 * agents + options.rounds * options.calls
                ours.timed.clear()
                api_cpu = CpuMeter(api_pid)
                for number in range(options.rounds):
                    turn = number % len(sides)  # each side goes first, second and last in turn
                    order = [*list(sides)[turn:], *list(sides)[:turn]]
                    for name in order:
                        with api_cpu.timing() if name == OURS else nullcontext():
                            seconds, latencies = closed_loop(options.calls, agents, calls[name])
                        sides[name].rounds.append(seconds)
                        sides[name].latencies.extend(latencies)
                results[agents] = sides
                split[agents] = phases(url, ours.timed)
                tail[agents] = phases(url, ours.timed, slowest=TAIL)
                api_cpu_ms[agents] = api_cpu.ms_per(options.calls * options.rounds)
            finally:
                ours.close()
                bare.close()
                peer.close()
        commit_ms = durable_commit_ms(url)
    return report(results, api_cpu_ms, options, split, commit_ms, tail, rows)


def report(
    results: dict[int, dict[str, Side]],
    api_cpu_ms: dict[int, float | None],
    options: argparse.Namespace,
    split: dict[int, dict[str, float]] | None = None,
    commit_ms: float | None = None,
    tail: dict[int, dict[str, float]] | None = None,
    written: dict[str, RowsMeter] | None = None,
) -> int:
    figures = {
        agents: {
            name: {
                "p50_ms": 1000 * side.percentile(0.50),
                "p99_ms": 1000 * side.percentile(0.99),
                "calls_per_s": side.rate(options.calls),
            }
            for name, side in sides.items()
        }
        for agents, sides in results.items()
    }
    if options.json:
        document = {
            "figures": figures,
            "api_cpu_ms_per_call": api_cpu_ms,
            "phases_ms": split,
            "tail_phases_ms": tail,
            "durable_commit_ms": commit_ms,
            "rows_written": rows_json(written or {}),
        }
        print(json.dumps(document))
        return 0
    print(
        f"agents benchmark: {options.rounds} rounds x {options.calls} calls per side;"
        f" {WORKERS} workers each, pool {POOL.kind} x {POOL.concurrency}"
    )
    rows = []
    for agents, sides in figures.items():
        ours, bare = sides[OURS], sides[BARE]
        for name, f in sides.items():
            rows.append(
                [
                    str(agents),
                    name,
                    f"{f['p50_ms']:.1f}",
                    f"{f['p99_ms']:.1f}",
                    f"{f['calls_per_s']:,.0f}",
                ]
            )
        cpu = api_cpu_ms.get(agents)
        rows.append(
            [
                str(agents),
                "ours / bare",
                f"{ours['p50_ms'] / bare['p50_ms']:.2f}x",
                f"{ours['p99_ms'] / bare['p99_ms']:.2f}x",
                f"{ours['calls_per_s'] / bare['calls_per_s']:.2f}x"
                + (f"  (API CPU {cpu:.2f} ms/call)" if cpu else ""),
            ]
        )
        if PEER in sides:
            peer = sides[PEER]
            rows.append(
                [
                    str(agents),
                    f"ours / {PEER}",
                    f"{ours['p50_ms'] / peer['p50_ms']:.2f}x",
                    f"{ours['p99_ms'] / peer['p99_ms']:.2f}x",
                    f"{ours['calls_per_s'] / peer['calls_per_s']:.2f}x",
                ]
            )
    print(render_table(["agents", "side", "p50 ms", "p99 ms", "calls/s"], rows))
    if commit_ms is not None:
        # A call records three facts, each durable before the next step: the decision (before
        # the 202), the claim (before the tool runs) and the outcome. Bare Celery flushes none.
        print(
            f"\nfloor: one durable commit on this Postgres takes {commit_ms:.1f} ms (median);"
            f" a call makes three in sequence: {3 * commit_ms:.1f} ms"
        )
    for agents, medians in (split or {}).items():
        print(f"\nwhere ours' call goes, {agents} agent(s) (medians):")
        print(render_table(["phase", "ms"], [[k, f"{v:.1f}"] for k, v in medians.items()]))
    for agents, medians in (tail or {}).items():
        print(f"\nwhere the slowest {TAIL:.0%} of ours' calls go, {agents} agent(s) (medians):")
        print(render_table(["phase", "ms"], [[k, f"{v:.1f}"] for k, v in medians.items()]))
    if 1 in figures:
        ratio = figures[1][OURS]["p50_ms"] / figures[1][BARE]["p50_ms"]
        print("\n" + _goal("1 agent p50", ratio, "<=", GOAL_P50_1))
    if 16 in figures:
        rate = figures[16][OURS]["calls_per_s"] / figures[16][BARE]["calls_per_s"]
        p99 = figures[16][OURS]["p99_ms"] / figures[16][BARE]["p99_ms"]
        print(_goal("16 agents calls/s", rate, ">=", GOAL_RATE_16))
        print(_goal("16 agents p99", p99, "<=", GOAL_P99_16))
    for agents, figure, sense, goal in PEER_GOALS:
        if agents in figures:
            ratio = figures[agents][OURS][figure] / figures[agents][PEER][figure]
            print(_goal(f"{agents} agent(s) {figure}", ratio, sense, goal, PEER))
    for line in rows_lines(written or {}):
        print(line)
    return 0


def _goal(what: str, ratio: float, sense: str, goal: float, against: str = "bare") -> str:
    met = ratio <= goal if sense == "<=" else ratio >= goal
    verdict = "met" if met else "NOT met"
    return f"{what}: {ratio:.2f}x {against} (goal {sense} {goal}x) -> {verdict}"


if __name__ == "__main__":
    raise SystemExit(main())

"""What bench.growth measures at each size, as a user would meet it: a running deployment
(`outcomes serve --api-only`, two `outcomes worker`s on RabbitMQ, `outcomes reconcile`) and
the commands an operator or auditor runs (`status`, `audit verify`, `audit digest`,
`rebuild`), each timed from outside, with its peak memory where it is a command."""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx

from bench._common import percentile
from bench.agents import OursAgents, closed_loop
from bench.agents_phases import Timed
from bench.http import api_server
from bench.throughput_workers import (
    Pool,
    _outcomes,
    ledger_reconcile_argv,
    ledger_worker_argv,
    running_worker,
    worker_env,
)

POOL = Pool("threads", 8, "WARNING")


@dataclass(frozen=True)
class Ran:
    """A command run to its end: its exit code, wall seconds, peak RSS (MB) and output."""

    code: int
    seconds: float
    peak_mb: float
    stdout: str
    stderr: str


def run_command(args: Sequence[str], env: dict[str, str], timeout_s: float = 7200) -> Ran:
    """`outcomes ARGS…` in a process of its own, its peak RSS read from the kernel's
    accounting of that one child (wait4), not sampled; killed after `timeout_s`."""
    begun = time.perf_counter()
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        child = subprocess.Popen(
            [*_outcomes(), *args],
            env=worker_env(env),
            stdout=out,
            stderr=err,
            start_new_session=True,
        )
        timer = threading.Timer(timeout_s, child.kill)
        timer.start()
        try:
            _, status, usage = os.wait4(child.pid, 0)
        finally:
            timer.cancel()
        child.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        return Ran(
            code=child.returncode,
            seconds=time.perf_counter() - begun,
            peak_mb=usage.ru_maxrss / 1024,
            stdout=out.read().decode(errors="replace"),
            stderr=err.read().decode(errors="replace"),
        )


@contextmanager
def deployment(env: dict[str, str], logs: Path) -> Iterator[tuple[str, int]]:
    """Reconciler, two workers and the API on `env`'s database and queue; (base URL, API pid)."""
    with ExitStack() as stack:
        stack.enter_context(running_worker("reconcile", ledger_reconcile_argv(), env, logs))
        for k in range(2):
            stack.enter_context(running_worker(f"worker{k}", ledger_worker_argv(POOL), env, logs))
        yield stack.enter_context(api_server(env, logs))


def agent_latencies(
    base: str, token: str, calls: int, timed: list[Timed] | None = None
) -> list[float]:
    """One agent's closed loop (submit, long-poll to the outcome, next): every call's ms;
    `timed` receives the timed calls' moments (for `bench.agents_phases.phases`)."""
    agents = OursAgents(base, token, 1)
    try:
        closed_loop(10, 1, agents.call)  # warm-up
        del agents.timed[:]
        _, found = closed_loop(calls, 1, agents.call)
    finally:
        agents.close()
    if timed is not None:
        timed.extend(agents.timed)
    return [1000 * s for s in found]


def agent_latencies_while(base: str, token: str, busy: Callable[[], bool]) -> list[float]:
    """The same loop for as long as `busy()` holds (a call that fails counts as 60 s)."""
    agents = OursAgents(base, token, 1)
    found: list[float] = []
    try:
        while busy():
            begun = time.perf_counter()
            try:
                agents.call(0, len(found))
                found.append(1000 * (time.perf_counter() - begun))
            except (httpx.HTTPError, RuntimeError):
                found.append(60_000.0)
    finally:
        agents.close()
    return found


def request_ms(client: httpx.Client, path: str, n: int, warm: int = 2) -> list[float]:
    """`n` GETs of `path` (after `warm` untimed), each in ms; a non-2xx answer is an error."""
    for _ in range(warm):
        client.get(path).raise_for_status()
    found = []
    for _ in range(n):
        begun = time.perf_counter()
        answer = client.get(path)
        found.append(1000 * (time.perf_counter() - begun))
        answer.raise_for_status()
    return found


@contextmanager
def console_client(base: str, token: str) -> Iterator[httpx.Client]:
    """A browser's session on the console, signed in with `token`."""
    with httpx.Client(base_url=base, follow_redirects=True, timeout=600) as client:
        client.post("/console/sign-in", data={"token": token}).raise_for_status()
        yield client


def p50_p99(values: Sequence[float]) -> tuple[float, float]:
    return statistics.median(values), percentile(values, 0.99)


def say(line: str) -> None:
    print(line, file=sys.stderr, flush=True)

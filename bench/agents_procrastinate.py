"""The procrastinate side of `bench.agents`: the durable peer an agent's author would pick
instead of us, doing the same closed loop on the same Postgres.

- two `procrastinate worker` processes (LISTEN/NOTIFY on, as shipped; concurrency 8 each, as
  ours' threads pools), running an `async def` no-op;
- each agent (a thread) defers the no-op (`noop.defer`: one INSERT, its NOTIFY) and then polls
  its job's row (`SELECT status FROM procrastinate_jobs WHERE id = ...`) every POLL_S until
  it has succeeded: procrastinate keeps the job's status, not its result, and has no way to
  wait for a job, so a poll is what its users write.

The workers import this module by its name (`--app bench.agents_procrastinate.app`) and find
their database in DSN_ENV.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

import procrastinate
import psycopg

from bench.throughput_workers import running_worker

DSN_ENV = "BENCH_PROCRASTINATE_DSN"
POLL_S = 0.001  # an agent's poll of its job row: at most this late, one cheap SELECT a poll
CONCURRENCY = 8

app = procrastinate.App(connector=procrastinate.PsycopgConnector(conninfo=os.environ.get(DSN_ENV)))


@app.task(name="bench.noop")
async def noop(seq: int) -> None:
    """The no-op: what a tool call costs procrastinate at the least."""


def apply_schema(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(procrastinate.schema.SchemaManager.get_schema())


@contextmanager
def running_workers(dsn: str, count: int, logs: Path) -> Iterator[None]:
    argv = [
        sys.executable,
        "-m",
        "procrastinate",
        "--app",
        "bench.agents_procrastinate.app",
        "worker",
        "--concurrency",
        str(CONCURRENCY),
    ]
    with ExitStack() as stack:
        for k in range(count):
            stack.enter_context(running_worker(f"procrastinate{k}", argv, {DSN_ENV: dsn}, logs))
        yield


class ProcrastinateAgents:
    def __init__(self, dsn: str, agents: int) -> None:
        # This process defers through the app's synchronous connector (a psycopg pool).
        self._app = procrastinate.App(connector=procrastinate.PsycopgConnector(conninfo=dsn))
        self._app.open()
        self._noop = self._app.configure_task("bench.noop")
        self._conns = [psycopg.connect(dsn, autocommit=True) for _ in range(agents)]

    def call(self, agent: int, i: int) -> None:
        job_id = self._noop.defer(seq=i)
        conn = self._conns[agent]
        while True:
            row = conn.execute(
                "SELECT status FROM procrastinate_jobs WHERE id = %s", (job_id,)
            ).fetchone()
            status = row[0] if row else None
            if status == "succeeded":
                return
            if status in ("failed", "cancelled", "aborted"):
                raise RuntimeError(f"procrastinate job {job_id}: {status}")
            time.sleep(POLL_S)

    def close(self) -> None:
        for conn in self._conns:
            conn.close()
        self._app.close()

"""The three variants of bench.throughput. Each round sends `n` no-op jobs from this process
(from `--producers` threads, one by default; reused connections per broker) and stops the
clock when the last one is done, as seen by polling: the ledger's jobs table, the baseline's
counter file, or Celery's celery_taskmeta table."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import psycopg
from celery import Celery

from bench.throughput_tasks import NOOP_TASK
from bench.throughput_tools import NOOP_TOOL
from bench.throughput_workers import WorkerProcess, pids_cpu, wait_until
from ledger.decisions import Caller, JobRequest
from ledger.runtime.ledger import Ledger
from ledger.runtime.outbox import Outbox
from ledger.services.submit import submit

OURS, BARE, BACKEND = "ours", "bare_celery", "celery_db_backend"
POLL_S = 0.01  # the same polling interval for every variant


class RoundFailedError(RuntimeError):
    """A round ended with jobs that did not all succeed."""


@dataclass(frozen=True)
class Round:
    seconds: float  # first send until the last job is done
    send_seconds: float  # first send until the last send returned
    worker_cpu_s: float | None = None  # the worker's processes, during the round
    database_cpu_s: float | None = None  # the Postgres backends serving this variant's database
    producer_cpu_s: float | None = None  # this process (sending and polling), during the round

    def rate(self, n: int) -> float:
        return n / self.seconds

    def send_rate(self, n: int) -> float:
        return n / self.send_seconds


class Variant(Protocol):
    name: str
    worker: WorkerProcess

    def database_cpu_seconds(self) -> float | None: ...

    def run(self, n: int, tag: str, timeout_s: float) -> Round: ...


def backends_cpu(conn: psycopg.Connection[Any]) -> float | None:
    """CPU seconds of the Postgres backends connected to this database (when Postgres runs on
    this machine and /proc shows them). Backends that come and go within a round are missed;
    every variant here keeps its connections pooled."""
    query = (
        "SELECT pid FROM pg_stat_activity"
        " WHERE datname = current_database() AND pid <> pg_backend_pid()"
    )  # not the benchmark's own polling session: it is not what is measured
    return pids_cpu([int(row[0]) for row in conn.execute(query).fetchall()])


def send_all(n: int, producers: int, send: Callable[[int], None]) -> None:
    """`send(i)` for i in range(n), from `producers` threads (each a slice of the range)."""
    if producers <= 1:
        for i in range(n):
            send(i)
        return
    failures: list[BaseException] = []

    def share(first: int) -> None:
        try:
            for i in range(first, n, producers):
                send(i)
        except BaseException as exc:
            failures.append(exc)

    threads = [threading.Thread(target=share, args=(k,)) for k in range(producers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if failures:
        raise failures[0]


def _count(conn: psycopg.Connection[Any], query: str, *params: Any) -> int:
    row = conn.execute(query, params).fetchone()
    return int(row[0]) if row else 0


@dataclass
class LedgerVariant:
    """Ours: `submit(...)` (decision in one transaction, then the id to the process's outbox,
    which publishes it to RabbitMQ and records the broker's confirmation) and real `outcomes
    worker` processes that claim, run and record each job."""

    ledger: Ledger
    dispatcher: Outbox
    poll: psycopg.Connection[Any]  # autocommit, to the ledger's database
    worker: WorkerProcess
    producers: int = 1
    name: str = OURS

    def database_cpu_seconds(self) -> float | None:
        return backends_cpu(self.poll)

    def run(self, n: int, tag: str, timeout_s: float) -> Round:
        caller = Caller(account=f"bench-{tag}", token_id="bench-throughput")
        requests = [JobRequest(tool=NOOP_TOOL, args={"seq": i}) for i in range(n)]
        refusals: list[int] = []

        def send(i: int) -> None:
            if not submit(self.ledger, caller, requests[i], self.dispatcher).view.accepted:
                refusals.append(i)

        started = time.perf_counter()
        send_all(n, self.producers, send)
        sent = time.perf_counter()
        refused = len(refusals)
        if refused:
            raise RoundFailedError(f"{self.name}: {refused} of {n} jobs were refused")
        # Every job of the round is in the table by now: done when no job is open (cheap on
        # ix_jobs_open, which the poll session is told to use: see bench.throughput._ours).
        open_jobs = "SELECT count(*) FROM jobs WHERE terminal = false"
        wait_until(
            lambda: _count(self.poll, open_jobs) == 0,
            started + timeout_s,
            [self.worker],
            POLL_S,
        )
        finished = time.perf_counter()
        ok = _count(
            self.poll,
            "SELECT count(*) FROM jobs WHERE account = %s AND status = 'succeeded'",
            caller.account,
        )
        if ok != n:
            raise RoundFailedError(f"{self.name}: {ok} of {n} jobs succeeded")
        return Round(finished - started, sent - started)


@dataclass
class BareVariant:
    """Bare Celery: the no-op task, no result backend; each run appends a byte to a file."""

    app: Celery
    queue: str
    counter: Path
    worker: WorkerProcess
    producers: int = 1
    name: str = BARE

    def database_cpu_seconds(self) -> float | None:
        return 0.0  # no database

    def run(self, n: int, tag: str, timeout_s: float) -> Round:
        before = self.counter.stat().st_size if self.counter.exists() else 0
        target = before + n
        send_task = self.app.send_task
        started = time.perf_counter()
        send_all(n, self.producers, lambda i: send_task(NOOP_TASK, args=[i], queue=self.queue))
        sent = time.perf_counter()
        wait_until(
            lambda: self.counter.exists() and self.counter.stat().st_size >= target,
            started + timeout_s,
            [self.worker],
            POLL_S,
        )
        finished = time.perf_counter()
        return Round(finished - started, sent - started)


@dataclass
class BackendVariant:
    """Celery with its database result backend on the same Postgres (a scratch database)."""

    app: Celery
    queue: str
    poll: psycopg.Connection[Any]  # autocommit, to the result backend's database
    worker: WorkerProcess
    producers: int = 1
    name: str = BACKEND

    def database_cpu_seconds(self) -> float | None:
        return backends_cpu(self.poll)

    def run(self, n: int, tag: str, timeout_s: float) -> Round:
        self.poll.execute("SET lock_timeout = '10s'")
        self.poll.execute("TRUNCATE celery_taskmeta")  # each round counts from zero
        send_task = self.app.send_task
        started = time.perf_counter()
        send_all(n, self.producers, lambda i: send_task(NOOP_TASK, args=[i], queue=self.queue))
        sent = time.perf_counter()
        wait_until(
            lambda: _count(self.poll, "SELECT count(*) FROM celery_taskmeta") >= n,
            started + timeout_s,
            [self.worker],
            POLL_S,
        )
        finished = time.perf_counter()
        ok = _count(self.poll, "SELECT count(*) FROM celery_taskmeta WHERE status = 'SUCCESS'")
        if ok != n:
            raise RoundFailedError(f"{self.name}: {ok} of {n} results are SUCCESS")
        return Round(finished - started, sent - started)

"""Helpers the benchmarks share: a scratch Postgres database, the ledger migrated on it (through
the front door: `open_ledger` and `ledger.services.admin.migrate`), timing, medians and a table.
The store itself, for the benchmarks that measure it: bench/_store.py."""

from __future__ import annotations

import os
import signal
import statistics
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from types import FrameType
from typing import Any

import psycopg
from psycopg import sql
from sqlalchemy.engine import make_url

from ledger.runtime.ledger import open_ledger
from ledger.services import admin

# The CI machines' Postgres service (contract §7): trust auth, superuser `postgres`.
ADMIN_URL = os.environ.get(
    "OUTCOMES_BENCH_PG_ADMIN", "postgresql://postgres@127.0.0.1:5432/postgres"
)


def _with_driver(url: str, drivername: str) -> str:
    parsed = make_url(url)
    if parsed.get_backend_name() in ("postgresql", "postgres"):
        parsed = parsed.set(drivername=drivername)
    return parsed.render_as_string(hide_password=False)


def sqlalchemy_url(url: str) -> str:
    """The URL as the ledger's engine wants it (postgresql+psycopg://; others unchanged): what
    `OUTCOMES_DATABASE_URL` and a Celery `db+` backend are given."""
    return _with_driver(url, "postgresql+psycopg")


def libpq_url(url: str) -> str:
    """The URL as plain psycopg wants it (postgresql://, no SQLAlchemy driver suffix)."""
    return _with_driver(url, "postgresql")


def _admin_execute(admin_url: str, statement: sql.Composed) -> None:
    with psycopg.connect(libpq_url(admin_url), autocommit=True) as conn:
        conn.execute(statement)


def _database_url(admin_url: str, name: str) -> str:
    return make_url(libpq_url(admin_url)).set(database=name).render_as_string(hide_password=False)


@contextmanager
def scratch_database(
    prefix: str, admin_url: str = ADMIN_URL, *, keep: bool = False
) -> Iterator[str]:
    """Create `<prefix>_<pid>`, yield its URL, and drop it afterwards, error or not (with
    `keep`, once the run ended well it is left for the caller to study, and drop)."""
    name = f"{prefix}_{os.getpid()}"
    drop = sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
    _admin_execute(admin_url, drop)
    _admin_execute(admin_url, sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    ended = False
    try:
        yield _database_url(admin_url, name)
        ended = True
    finally:
        if not (keep and ended):
            _admin_execute(admin_url, drop)


def migrate(url: str) -> None:
    """Create or upgrade the ledger's schema in this database, to head, as `outcomes migrate`
    does."""
    with open_ledger(sqlalchemy_url(url), pool_size=1) as ledger:
        admin.migrate(ledger)


def server_settings(conn: psycopg.Connection[Any], names: Sequence[str]) -> dict[str, str]:
    """These Postgres settings as the server reports them (each report prints a few)."""
    query = "SELECT current_setting(%s)"
    return {name: str(conn.execute(query, (name,)).fetchall()[0][0]) for name in names}


@contextmanager
def exit_cleanly_on_sigterm() -> Iterator[None]:
    """Turn SIGTERM into SystemExit so that `finally` blocks (dropping databases) still run."""

    def _raise(signum: int, _frame: FrameType | None) -> None:
        raise SystemExit(128 + signum)

    previous = signal.signal(signal.SIGTERM, _raise)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def seconds_for(run: Callable[[], None]) -> float:
    started = time.perf_counter()
    run()
    return time.perf_counter() - started


@dataclass(frozen=True)
class Timing:
    """One timed run of `n` operations: wall-clock and this process's CPU seconds."""

    n: int
    wall_s: float
    cpu_s: float

    @property
    def rate(self) -> float:
        return self.n / self.wall_s

    @property
    def cpu_us(self) -> float:
        """Client CPU (Python, driver, socket calls) per operation, in microseconds."""
        return self.cpu_s / self.n * 1e6


def timed(n: int, run: Callable[[], None]) -> Timing:
    wall, cpu = time.perf_counter(), time.process_time()
    run()
    return Timing(n, time.perf_counter() - wall, time.process_time() - cpu)


@dataclass(frozen=True)
class Summary:
    """Rates (operations per second) of one variant over the timed rounds; optionally the
    client CPU per operation (microseconds) of each round."""

    rates: tuple[float, ...]
    cpu_us: tuple[float, ...] = ()

    @classmethod
    def of(cls, timings: Sequence[Timing]) -> Summary:
        return cls(tuple(t.rate for t in timings), tuple(t.cpu_us for t in timings))

    @property
    def median(self) -> float:
        return statistics.median(self.rates)

    @property
    def low(self) -> float:
        return min(self.rates)

    @property
    def high(self) -> float:
        return max(self.rates)

    @property
    def median_cpu_us(self) -> float | None:
        return statistics.median(self.cpu_us) if self.cpu_us else None


def durable_commit_ms(url: str, commits: int = 100) -> float:
    """Median milliseconds of one durable commit (an insert, then COMMIT waiting for the WAL's
    flush) on this database: the floor under anything that records before it answers."""
    seconds = []
    table = sql.Identifier(f"durable_probe_{os.getpid()}")  # logged: a temp table is not
    with psycopg.connect(libpq_url(url), autocommit=False) as conn:
        conn.execute(sql.SQL("CREATE TABLE {} (x int)").format(table))
        conn.execute("SET synchronous_commit = on")
        conn.commit()
        try:
            for _ in range(commits):
                begun = time.perf_counter()
                conn.execute(sql.SQL("INSERT INTO {} VALUES (1)").format(table))
                conn.commit()
                seconds.append(time.perf_counter() - begun)
        finally:
            conn.rollback()
            conn.execute(sql.SQL("DROP TABLE {}").format(table))
            conn.commit()
    return 1000 * statistics.median(seconds)


def render_table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """A plain text table: first column left-aligned, the others right-aligned."""
    widths = [max(len(r[i]) for r in [headers, *rows]) for i in range(len(headers))]

    def line(cells: Sequence[str]) -> str:
        first, *rest = cells
        return "  ".join(
            [first.ljust(widths[0]), *(c.rjust(w) for c, w in zip(rest, widths[1:], strict=True))]
        )

    rule = "  ".join("-" * w for w in widths)
    return "\n".join([line(headers), rule, *(line(r) for r in rows)])


def percentile(values: Sequence[float], q: float) -> float:
    """The nearest-rank quantile `q` (0..1) of `values`; 0.0 for none."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else 0.0

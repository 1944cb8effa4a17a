"""The scans bench.reconcile times on each ledger, how it times them, and EXPLAIN of the scan.

- steady       `reconcile_once(ledger, None, policy, at=steady clock)`: nothing is overdue.
- overdue      the reconciler's read (`Reads.overdue_jobs`) + `findings(...)` at a clock where
               every open job is overdue; nothing is appended, so it repeats.
- overdue_sql  the SQL statement that read sends, run on the same pool and fetched, without
               building views (the database's share, apart from Python's).
- steady_churned, overdue_churned   as steady and overdue, after `churn`.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Engine, event

from bench._store import SqlStore
from bench.reconcile_ledgers import FilledLedger
from bench.reconcile_plan import POLICY
from ledger.reconcile_rules import OpenJob, findings
from ledger.services.reconcile import reconcile_once

WARMUP = 5
OVERDUE_AFTER = timedelta(days=1)  # a clock at which every open job is overdue
STEADY, OVERDUE, OVERDUE_SQL = "steady", "overdue", "overdue_sql"
STEADY_CHURNED, OVERDUE_CHURNED = "steady_churned", "overdue_churned"
VACUUMED_SCANS = (STEADY, OVERDUE, OVERDUE_SQL)
CHURNED_SCANS = (STEADY_CHURNED, OVERDUE_CHURNED)
GOAL_SCANS = (STEADY, OVERDUE, STEADY_CHURNED, OVERDUE_CHURNED)


def overdue_jobs(store: SqlStore, now: datetime) -> list[OpenJob]:
    """The reconciler's read, as `reconcile_once` makes it."""
    with store.reading() as reads:
        return reads.overdue_jobs(now, None)


@contextmanager
def captured_statements(engine: Engine) -> Iterator[list[tuple[str, Any]]]:
    seen: list[tuple[str, Any]] = []

    def listener(
        conn: Any, cursor: Any, statement: str, parameters: Any, context: Any, many: bool
    ) -> None:
        seen.append((statement, parameters))

    event.listen(engine, "before_cursor_execute", listener)
    try:
        yield seen
    finally:
        event.remove(engine, "before_cursor_execute", listener)


def scan_statement(filled: FilledLedger, now: datetime) -> tuple[str, Any]:
    """The SQL that the overdue read sends, with its parameters."""
    with captured_statements(filled.store.engine) as seen:
        overdue_jobs(filled.store, now)
    selects = [s for s in seen if s[0].lstrip().upper().startswith("SELECT")]
    if len(selects) != 1:
        raise RuntimeError(f"overdue_jobs sent {len(selects)} SELECTs, expected one")
    return selects[0]


@dataclass
class Scanner:
    filled: FilledLedger
    overdue_sql: tuple[str, Any] = ("", None)

    @property
    def overdue_now(self) -> datetime:
        return self.filled.steady_now + OVERDUE_AFTER

    def prepare(self) -> None:
        filled = self.filled
        self.overdue_sql = scan_statement(filled, self.overdue_now)
        steady = reconcile_once(filled.ledger, None, POLICY, at=filled.steady_now)
        if steady.examined or steady.recorded:
            raise RuntimeError(f"{filled.name}: open jobs overdue at the steady clock")
        candidates = overdue_jobs(filled.store, self.overdue_now)
        found = findings(candidates, self.overdue_now, POLICY)
        want = filled.plan.open_jobs
        if len(candidates) != want or len(found) != want:
            raise RuntimeError(
                f"{filled.name}: {len(candidates)} overdue, {len(found)} findings; "
                f"expected {want} of each"
            )

    def steady(self) -> None:
        reconcile_once(self.filled.ledger, None, POLICY, at=self.filled.steady_now)

    def overdue(self) -> None:
        now = self.overdue_now
        findings(overdue_jobs(self.filled.store, now), now, POLICY)

    def overdue_sql_only(self) -> None:
        statement, parameters = self.overdue_sql
        with self.filled.store.connection() as conn:
            conn.exec_driver_sql(statement, parameters).all()

    def run(self, scan: str) -> tuple[float, float]:
        """(wall, this process's CPU) milliseconds of one scan."""
        action: Callable[[], None] = {
            STEADY: self.steady,
            OVERDUE: self.overdue,
            OVERDUE_SQL: self.overdue_sql_only,
            STEADY_CHURNED: self.steady,
            OVERDUE_CHURNED: self.overdue,
        }[scan]
        cpu, wall = time.process_time(), time.perf_counter()
        action()
        return (time.perf_counter() - wall) * 1000.0, (time.process_time() - cpu) * 1000.0


@dataclass(frozen=True)
class ScanTimes:
    """Milliseconds per scan over the timed repetitions: wall clock, and the CPU time of this
    process (the client's share; it shows what other load on the machine adds to the wall)."""

    ms: tuple[float, ...]
    cpu_ms: tuple[float, ...]

    @property
    def median(self) -> float:
        return statistics.median(self.ms)

    @property
    def p95(self) -> float:
        if len(self.ms) < 2:
            return self.ms[0]
        return statistics.quantiles(self.ms, n=20, method="inclusive")[-1]

    @property
    def low(self) -> float:
        return min(self.ms)

    @property
    def cpu_median(self) -> float:
        return statistics.median(self.cpu_ms)


Timings = dict[str, dict[str, ScanTimes]]  # scan -> ledger -> times


def measure(scanners: dict[str, Scanner], reps: int, scans: Sequence[str]) -> Timings:
    """After a warm-up, `reps` of each scan per ledger, the ledgers' order alternating."""
    for scanner in scanners.values():
        scanner.prepare()
        for scan in scans:
            for _ in range(WARMUP):
                scanner.run(scan)
    samples: dict[str, dict[str, list[tuple[float, float]]]] = {
        s: {n: [] for n in scanners} for s in scans
    }
    order = list(scanners)
    for rep in range(reps):
        for scan in scans:
            for name in order if rep % 2 == 0 else reversed(order):
                samples[scan][name].append(scanners[name].run(scan))
    return {
        s: {n: ScanTimes(tuple(w for w, _ in ms), tuple(c for _, c in ms)) for n, ms in by.items()}
        for s, by in samples.items()
    }


def explain(scanner: Scanner, now: datetime) -> list[str]:
    statement, parameters = scan_statement(scanner.filled, now)
    with scanner.filled.store.connection() as conn:
        rows = conn.exec_driver_sql("EXPLAIN (ANALYZE, BUFFERS) " + statement, parameters).all()
    return [str(r[0]) for r in rows]


def uses_open_index(plan: Sequence[str]) -> bool:
    joined = "\n".join(plan)
    return "ix_jobs_open" in joined and "Seq Scan on jobs" not in joined

"""bench.reconcile's two ledgers, A (small) and B (large), each in a scratch database: migrated,
filled (the closed history by COPY, the open jobs through the real submit and claim), checked,
and vacuumed; dropped at the end, on error too."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

import psycopg

from bench._common import libpq_url, scratch_database
from bench._store import SqlStore, sql_store
from bench.reconcile_checks import (
    SAMPLE_STREAMS,
    Check,
    check_counts,
    check_streams,
    sample_job_ids,
)
from bench.reconcile_history import jobs_projection, load_closed, request_for
from bench.reconcile_plan import LARGE, LEASE_S, POLICY, SMALL, Options, Plan
from ledger.runtime.ledger import Ledger
from ledger.services import admin
from ledger.services.submit import submit
from ledger.services.work import ClaimResult, claim


@dataclass
class FilledLedger:
    """One ledger of the benchmark, as filling left it."""

    name: str
    plan: Plan
    store: SqlStore
    check: Check
    steady_now: datetime = field(default_factory=lambda: datetime.now(UTC))
    url: str = ""
    churned: int = 0  # closed jobs whose dead row versions `churn` left in `jobs`
    ledger: Ledger = field(init=False)  # the handle the services take, on `store`

    def __post_init__(self) -> None:
        self.ledger = Ledger(self.store)


def open_jobs(ledger: Ledger, plan: Plan) -> None:
    """The open jobs, through the real submit path (and claim, for the running ones)."""
    for number in range(plan.open_jobs):
        caller, request, _ = request_for(10_000_000 + number)
        view = submit(ledger, caller, request).view
        if not view.accepted:
            raise RuntimeError(f"bench job refused: {view.error}")
        if number < plan.running:
            claimed = claim(ledger, view.job_id, f"worker-{number % 16}", LEASE_S)
            if claimed.result is not ClaimResult.CLAIMED:
                raise RuntimeError(f"bench job not claimed: {claimed.reason}")


def vacuum_analyze(url: str) -> None:
    with psycopg.connect(libpq_url(url), autocommit=True) as conn:
        conn.execute("VACUUM (ANALYZE) events, jobs, leases")


def build_ledger(
    name: str, url: str, store: SqlStore, plan: Plan, verify_all: bool
) -> FilledLedger:
    started = time.perf_counter()
    ledger = Ledger(store)
    admin.migrate(ledger)
    load_closed(url, plan, jobs_projection(store), ledger.request_key)
    opening = datetime.now(UTC)
    open_jobs(ledger, plan)
    steady_now = datetime.now(UTC)
    if steady_now - opening >= timedelta(seconds=min(LEASE_S, POLICY.default_start_within_s)):
        raise RuntimeError("creating the open jobs took longer than the lease: raise LEASE_S")
    check = Check()
    check_counts(store, plan, check)
    check_streams(store, None if verify_all else sample_job_ids(store, SAMPLE_STREAMS), check)
    vacuum_analyze(url)
    check.fill_s = time.perf_counter() - started
    if check.problems:
        raise RuntimeError(f"ledger {name} is not consistent: {'; '.join(check.problems)}")
    return FilledLedger(name, plan, store, check, steady_now, url)


@contextmanager
def ledgers(options: Options) -> Iterator[dict[str, FilledLedger]]:
    with ExitStack() as stack:
        built: dict[str, FilledLedger] = {}
        for name, size in ((SMALL, options.small), (LARGE, options.large)):
            url = stack.enter_context(scratch_database(f"outcomes_bench_reconcile_{name}"))
            store = stack.enter_context(sql_store(url))
            plan = Plan(size, options.open_jobs, options.running)
            verify_all = name == SMALL or options.verify_large
            built[name] = build_ledger(name, url, store, plan, verify_all)
        yield built

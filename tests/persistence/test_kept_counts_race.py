"""Kept counts after a race: writers submitting (accepted, refused by quota), workers claiming
and recording outcomes and retries, a reconciler recording findings, cancels, and two folds of
the deltas running all along, on every store through `any_store` (threads through the use
cases); and on SQLite and Postgres, writer processes holding transactions open. Afterwards
every kept count equals the full count (tests/kept_counts.py)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from datetime import UTC, datetime, timedelta

import pytest

import tests.tools  # noqa: F401  (the tools below are registered by importing it)
from ledger.decisions import Caller, JobRequest
from ledger.errors import LedgerError
from ledger.persistence.base import Store
from ledger.reconcile_rules import ReconcilePolicy
from ledger.runtime.ledger import Ledger
from ledger.services.cancel import Canceller, cancel
from ledger.services.execute import Executor
from ledger.services.reconcile import reconcile_once
from ledger.services.submit import submit
from tests.concurrent_writers import (
    SPAWN,
    START_TIMEOUT_S,
    Report,
    running,
    take_report,
    wait_until,
    write_jobs,
)
from tests.kept_counts import (
    assert_kept_counts_exact,
    counts_agree_in_one_snapshot,
    full_groups,
)
from tests.tools import ECHO, METERED, RECONCILE_READS

WRITERS = 4
ROUNDS = 5
OPERATOR = Canceller("*", "operator", "op")
POLICY = ReconcilePolicy(relay_after_s=3600)


@contextmanager
def folding(store: Store, folds: int = 2) -> Iterator[list[bool]]:
    """While the body runs: `folds` threads folding the deltas over and over (two at once must
    count nothing twice), and a checker comparing the kept counts with a full count in one
    snapshot, again and again. Yields the checker's verdicts (each must be True)."""
    stop = threading.Event()
    verdicts: list[bool] = []
    failures: list[BaseException] = []

    def repeat(step: Callable[[], object]) -> None:
        try:
            while not stop.is_set():
                step()
        except BaseException as exc:  # reported in the test's thread
            failures.append(exc)

    steps: list[Callable[[], object]] = [store.compact_counts] * folds
    steps.append(lambda: verdicts.append(counts_agree_in_one_snapshot(store)))
    threads = [threading.Thread(target=repeat, args=(step,)) for step in steps]
    for thread in threads:
        thread.start()
    try:
        yield verdicts
    finally:
        stop.set()
        for thread in threads:
            thread.join(timeout=60)
    assert failures == []
    assert verdicts and all(verdicts), f"{verdicts.count(False)} of {len(verdicts)} disagreed"


def _quietly(step: Callable[[], object]) -> None:
    """A step that may lose its race (the job moved: the reconciler closed it, a cancel came
    first): the ledger refuses it, and the counts must still be exact."""
    with suppress(LedgerError):
        step()


def _agent(ledger: Ledger, me: int, failures: list[BaseException]) -> None:
    try:
        caller = Caller(account=f"acct-{me % 2}", token_id=f"tok-{me}")
        worker = Executor(ledger, f"host-{me}:1")
        for n in range(ROUNDS):

            def job(tool: str, args: dict[str, object]) -> str:
                return submit(ledger, caller, JobRequest(tool, args)).view.job_id

            ran = job(ECHO, {"text": f"{me}-{n}"})
            _quietly(lambda: worker.execute(ran))  # noqa: B023 (called at once)
            flaky = job("canary.flaky", {"secret": f"s-{me}-{n}"})
            for _ in range(2):  # a retry, then the last attempt fails
                _quietly(lambda: worker.execute(flaky))  # noqa: B023
            crashed = job("canary.crash", {"secret": "x"})
            _quietly(lambda: worker.execute(crashed))  # noqa: B023
            dropped = job(ECHO, {"text": "cancel me"})
            _quietly(lambda: cancel(ledger, dropped, OPERATOR, "changed my mind"))  # noqa: B023
            job(RECONCILE_READS, {})  # left for the reconciler
            job(METERED, {"text": "q"})  # past the quota: refused
    except BaseException as exc:
        failures.append(exc)


def _succeeded(store: Store) -> int:
    with store.reading() as reads:
        return reads.summarize_jobs(None).by_status.get("succeeded", 0)


def test_counts_stay_exact_through_a_race_of_every_writer(any_store: Store) -> None:
    ledger = Ledger(any_store)
    failures: list[BaseException] = []
    agents = [
        threading.Thread(target=_agent, args=(ledger, me, failures), name=f"agent-{me}")
        for me in range(WRITERS)
    ]
    done = threading.Event()

    def reconciler() -> None:
        try:
            # It judges every waiting job overdue: on a busy machine it could close each one
            # before its worker ran it. The race begins once one job has run to success.
            wait_until(lambda: _succeeded(any_store) > 0 or bool(failures), 60, "a success")
            while not done.is_set():  # every waiting job is past its start deadline by then
                reconcile_once(ledger, None, POLICY, at=datetime.now(UTC) + timedelta(hours=1))
        except BaseException as exc:
            failures.append(exc)

    finder = threading.Thread(target=reconciler, name="reconciler")
    with folding(any_store):
        finder.start()
        for agent in agents:
            agent.start()
        for agent in agents:
            agent.join(timeout=300)
        done.set()
        finder.join(timeout=60)
    assert failures == []
    assert_kept_counts_exact(any_store)
    with any_store.reading() as reads:
        summary = reads.summarize_jobs(None)
        findings = reads.count_findings()
    assert summary.jobs == WRITERS * ROUNDS * 6
    statuses = set(summary.by_status)
    assert {"succeeded", "failed", "declined", "refused"} <= statuses
    assert any(f.type == "job.outcome_missing" for f in findings)  # the reconciler raced too
    # Changes after the last fold are deltas still pending (Postgres): counted all the same.
    _agent(ledger, WRITERS, failures)
    assert failures == []
    assert_kept_counts_exact(any_store)
    any_store.compact_counts()
    assert_kept_counts_exact(any_store)


@pytest.mark.parametrize("hold_open", [False, True])
def test_counts_stay_exact_with_writer_processes(database_url: str, hold_open: bool) -> None:
    """Writer processes record whole jobs in small transactions (some held open a moment)
    while this process folds the deltas twice over; then the counts equal the full count."""
    from tests.factories import open_sql

    store = open_sql(database_url)
    try:
        start = SPAWN.Barrier(WRITERS + 1)
        results = SPAWN.Queue()
        children = [
            SPAWN.Process(target=write_jobs, args=(database_url, me, 60, hold_open, start, results))
            for me in range(WRITERS)
        ]
        with running(children), folding(store):
            start.wait(timeout=START_TIMEOUT_S)
            reports: list[Report] = [take_report(results, 240) for _ in children]
        assert sum(len(r.positions) for r in reports) == WRITERS * 60
        assert sum(full_groups(store).values()) == WRITERS * 20
        assert_kept_counts_exact(store)
        store.compact_counts()
        assert_kept_counts_exact(store)
    finally:
        store.close()

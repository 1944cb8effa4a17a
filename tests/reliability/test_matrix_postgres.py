"""Reliability matrix, the database (scenarios 6 and 10).

6. PostgreSQL goes away while outcomes are being written: tools finish while the server is
   down, so their outcome writes must retry through the outage, once each.
10. The application's database role cannot rewrite history: UPDATE, DELETE and TRUNCATE on the
    events table are refused (by triggers, even where privileges would allow them).

Restarting PostgreSQL drops every connection on the machine, other tests' included; the
server is always started again (and awaited) before the test ends.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

import psycopg
import pytest
from psycopg.conninfo import make_conninfo
from sqlalchemy import text
from sqlalchemy.engine import make_url

import ledger.services.execute as execution
import ledger.services.work as work
import tests.tools  # noqa: F401  (the test process submits to these tools)
from ledger.codes import Code, NextAction, Status
from ledger.decisions import JobRequest
from ledger.errors import ImmutableLedgerError, StorageUnavailableError
from ledger.events import job_stream
from ledger.outcomes import Succeeded
from ledger.persistence.appends import JobAppend, JobAppended
from ledger.persistence.base import Reads
from ledger.persistence.sql_store import SqlStore, SqlWrites
from ledger.runtime.ledger import Ledger
from ledger.services.execute import Executor
from ledger.services.submit import submit
from ledger.tools import ToolContext, tool, unregister
from tests.databases import PG_ADMIN_DSN
from tests.factories import get_job, open_sql, verify_store
from tests.plugins.deployments import AGENT, Deployment, deployments, stream_types, wait_terminal
from tests.plugins.matrix import (
    APP_GRANTS,
    admin,
    deployment_verdict,
    pg_role,
    postgres_restart,
    postgres_start,
    postgres_stop,
    prepare,
    read_marks,
    require_control,
    services_restored,
    verdict,
    wait_for,
)
from tests.reliability.checker import fast_policy, settle
from tests.tools import Work

# Stops or restarts a shared service: runs alone, after the parallel part of `make test`.
pytestmark = pytest.mark.serial

GATED = 6
QUICK = 10

# --- 6. PostgreSQL goes away while outcomes are being written ---------------------------------


@pytest.mark.parametrize("deployment", deployments("rabbitmq/postgres"), indirect=True)
def test_postgres_restarted_while_outcomes_are_written(deployment: Deployment) -> None:
    require_control("pg_ctlcluster")
    dep = deployment
    marks = prepare(dep, OUTCOMES_LEASE_S="6")  # a lost claim would surface in seconds
    dep.start_workers(count=2, concurrency=4)  # 8 slots: 6 gated tools, 2 free for the rest
    gate = dep.home.parent / "gate"
    gated = [
        dep.submit(
            "matrix.gated_charge" if i % 2 else "matrix.gated_read", {"gate": str(gate)}
        ).job_id
        for i in range(GATED)
    ]
    wait_for(lambda: len(read_marks(marks)) == GATED, 60, "the gated tools to start")
    quick = [
        dep.submit("matrix.charge" if i % 2 else "matrix.read", {}, dispatch=False).job_id
        for i in range(QUICK)
    ]
    with services_restored():
        postgres_stop()
        for job_id in quick:  # their claims fail while the server is down
            dep.dispatcher.dispatch(job_id)
        gate.touch()
        wait_for(
            lambda: sum(m.what == "left" for m in read_marks(marks)) == GATED,
            30,
            "the gated tools to return while the database is down",
        )
        wait_for(
            lambda: "ledger unavailable" in dep.worker_logs(), 30, "a claim to meet the outage"
        )
        postgres_start()
    down_until = max(m.at for m in read_marks(marks) if m.what == "left")
    dep.store.close()  # this process's pooled connections died with the server
    after = [  # and the deployment works as before
        dep.submit("matrix.charge" if i % 2 else "matrix.read", {}).job_id for i in range(QUICK)
    ]
    ids = [*gated, *quick, *after]
    done = wait_terminal(dep.store, ids, timeout_s=90)
    counters = deployment_verdict(dep, "6 postgres down while outcomes are written")

    assert {v.status for v in done.values()} == {Status.SUCCEEDED}, {
        j: (v.status, v.error) for j, v in done.items() if v.status is not Status.SUCCEEDED
    }
    for job_id in gated:
        stream = dep.store.read_stream(job_stream(job_id))
        assert [e.type for e in stream] == ["job.accepted", "work.started", "work.succeeded"]
        outcome = stream[-1]
        # Written through the outage: the tool had returned before the server came back.
        assert outcome.recorded_at.timestamp() > down_until
        assert len({e.event_id for e in stream}) == len(stream)
    assert Counter(dep.side_effect_jobs()) == Counter(ids)  # every tool ran exactly once
    assert counters.by_status == {"work.succeeded": len(ids)}


# --- 10. the application's role cannot rewrite events -----------------------------------------

# More than the application needs on purpose: the triggers, not missing grants, must refuse.
EVERY_PRIVILEGE = (*APP_GRANTS, "GRANT UPDATE, DELETE, TRUNCATE ON events TO {role}")
REWRITES = {
    "UPDATE": "UPDATE events SET actor = 'mallory'",
    "DELETE": "DELETE FROM events",
    "TRUNCATE": "TRUNCATE events",
}


def dsn(url: str) -> str:
    parsed = make_url(url)
    return make_conninfo(PG_ADMIN_DSN, user=parsed.username, dbname=parsed.database)


@contextmanager
def ledger_as(url: str) -> Iterator[SqlStore]:
    store = open_sql(url)
    try:
        yield store
    finally:
        store.close()


def run_a_job_as(store: SqlStore) -> str:
    """The application's whole write path under this role: decide, claim, run, record."""
    job = submit(Ledger(store), AGENT, JobRequest("matrix.read", {"note": "as the app role"})).view
    execution = Executor(Ledger(store), "matrix-worker").execute(job.job_id)
    assert execution.event_type == "work.succeeded", execution
    return job.job_id


def assert_rewrites_refused(url: str, store: SqlStore) -> None:
    for verb, statement in REWRITES.items():
        with psycopg.connect(dsn(url)) as conn:
            with pytest.raises(psycopg.errors.InsufficientPrivilege, match="append-only"):
                conn.execute(statement.encode())
            conn.rollback()
        with pytest.raises(ImmutableLedgerError, match=verb), store.transaction() as tx:
            tx.conn.execute(text(statement))


@pytest.mark.postgres
def test_app_role_cannot_update_delete_or_truncate_events(pg_database: str) -> None:
    with pg_role(pg_database, EVERY_PRIVILEGE) as (role, url), ledger_as(url) as store:
        job_id = run_a_job_as(store)  # INSERT (and the read models) work as this role
        before = [e.hash for e in store.iter_events()]  # SELECT works
        assert before
        assert_rewrites_refused(url, store)
        with (  # nor can it switch the guard off
            psycopg.connect(dsn(url)) as conn,
            pytest.raises(psycopg.errors.InsufficientPrivilege, match="owner"),
        ):
            conn.execute(b"ALTER TABLE events DISABLE TRIGGER events_no_update_delete")
        assert [e.hash for e in store.iter_events()] == before
        counters = verdict(store, "10 app role cannot rewrite events")
    assert counters.by_status == {"work.succeeded": 1}
    assert role and job_id


@pytest.mark.postgres
def test_even_the_events_owner_is_refused_and_a_bypass_is_caught(pg_database: str) -> None:
    with pg_role(pg_database, EVERY_PRIVILEGE) as (role, url), ledger_as(url) as store:
        admin(pg_database, f"ALTER TABLE events OWNER TO {role}")
        run_a_job_as(store)
        assert_rewrites_refused(url, store)
        counters = verdict(store, "10 events owner cannot rewrite events")
        assert counters.by_status == {"work.succeeded": 1}
        # The documented limit: an owner may disable its own table's triggers. Deploy the
        # application with a role that does not own `events`; what an owner (or a superuser)
        # rewrites anyway is caught by the hash chain.
        with psycopg.connect(dsn(url), autocommit=True) as conn:
            conn.execute(b"ALTER TABLE events DISABLE TRIGGER events_no_update_delete")
            conn.execute(b"UPDATE events SET actor = 'mallory' WHERE stream_version = 1")
            conn.execute(b"ALTER TABLE events ENABLE TRIGGER events_no_update_delete")
        report = verify_store(store)
        assert not report.ok and report.first_problem is not None


# --- 6'. a plain restart in the middle of a batch ----------------------------------------------


@pytest.mark.parametrize("deployment", deployments("rabbitmq/postgres"), indirect=True)
def test_postgres_restart_during_a_batch(deployment: Deployment) -> None:
    require_control("pg_ctlcluster")
    dep = deployment
    marks = prepare(dep, OUTCOMES_LEASE_S="6")
    dep.start_workers(count=2, concurrency=2)
    ids = [
        dep.submit("matrix.charge" if i % 2 else "matrix.read", {"seconds": 1}).job_id
        for i in range(24)
    ]
    wait_for(lambda: len(read_marks(marks)) >= 4, 60, "the batch to be running")
    with services_restored():
        postgres_restart()
    dep.store.close()  # this process's pooled connections died with the server
    done = wait_terminal(dep.store, ids, timeout_s=120)
    counters = deployment_verdict(dep, "6' postgres restarted during a batch")

    logs = dep.worker_logs()
    assert "ledger unavailable" in logs or "lease renewal" in logs  # the restart was felt
    effects = Counter(dep.side_effect_jobs())
    for job_id, view in done.items():
        types = stream_types(dep.store, job_id)
        if view.spends:  # at most once, whatever happened
            assert types.count("work.started") <= 1 and effects[job_id] <= 1, types
        assert effects[job_id] <= types.count("work.started"), types
    assert counters.terminal == len(ids)


# --- 6''. an outage longer than the outcome write's retry budget ------------------------------


class SwitchableLedger(SqlStore):
    """The same ledger, behind a switch that makes every transaction and read fail as a
    database that went away would (StorageUnavailableError)."""

    def __init__(self, inner: SqlStore) -> None:
        super().__init__(inner.engine, inner.projections)
        self.down = threading.Event()

    @contextmanager
    def transaction(self) -> Iterator[SqlWrites]:
        if self.down.is_set():
            raise StorageUnavailableError("connection refused (simulated outage)")
        with super().transaction() as tx:
            yield tx

    @contextmanager
    def reading(self) -> Iterator[Reads]:
        if self.down.is_set():
            raise StorageUnavailableError("connection refused (simulated outage)")
        with super().reading() as reads:
            yield reads

    @contextmanager
    def quick_read(self) -> Iterator[Reads]:
        if self.down.is_set():
            raise StorageUnavailableError("connection refused (simulated outage)")
        with super().quick_read() as reads:
            yield reads

    def append_jobs(self, items: Sequence[JobAppend]) -> list[JobAppended]:
        if self.down.is_set():  # the batched write path has its own connection
            raise StorageUnavailableError("connection refused (simulated outage)")
        return super().append_jobs(items)


@pytest.mark.postgres
def test_an_outage_longer_than_the_write_budget_is_surfaced_never_rerun(
    pg_database: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The tool ran, then the ledger stayed down past the outcome write's budget: the worker
    gives up on the write without treating it as a failed claim (no second run), and once the
    lease lapses the reconciler tells the agent to verify at the source."""
    real = open_sql(pg_database)
    ledger = SwitchableLedger(real)

    def spend_then_outage(args: Work, ctx: ToolContext) -> Succeeded:
        ledger.down.set()  # the database goes away while the tool finishes
        return Succeeded(result={"charged": True})

    tool("matrix.spend_then_outage", spends=True, timeout_s=30)(spend_then_outage)
    # The real budget (minutes), shortened: what matters is that the outage outlasts it.
    monkeypatch.setattr(execution, "OUTCOME_WRITE_BUDGET_S", 0.3)
    try:
        job_id = submit(
            Ledger(ledger), AGENT, JobRequest("matrix.spend_then_outage", {})
        ).view.job_id
        executor = Executor(Ledger(ledger), "matrix-worker", lease_s=1.0)
        with pytest.raises(execution.OutcomeUnrecordedError):
            executor.execute(job_id)  # workers/tasks.py logs it and does not retry the claim
        ledger.down.clear()
        again = executor.execute(job_id)  # a redelivery, should one come: never a second run
        assert again.claim is work.ClaimResult.SKIPPED
        settle(real, None, fast_policy(), timeout_s=30)
        view = get_job(real, job_id)
        assert view is not None and view.error is not None
        assert (view.status, view.code, view.error.cause, view.next_action) == (
            Status.FAILED,
            Code.OUTCOME_MISSING,
            "worker_lost",
            NextAction.VERIFY_AT_SOURCE,
        )
        assert stream_types(real, job_id).count("work.started") == 1
        verdict(real, "6'' outage longer than the write budget")
    finally:
        unregister("matrix.spend_then_outage")
        real.close()

"""A worker's outcome write survives a database blip (issue 3).

Whether the connection is reported lost right after the commit (the writer cannot know whether
its write landed) or the Postgres backend is terminated under it, `record_outcome` retries and
the outcome is recorded exactly once: the job succeeds with no duplicate event.
"""

from __future__ import annotations

from collections.abc import Sequence

import psycopg
import pytest

import ledger.services.work as work
from ledger.codes import Status
from ledger.decisions import JobRequest
from ledger.errors import StorageUnavailableError
from ledger.events import NewEvent, WorkSucceeded, job_stream
from ledger.job_view import JobView
from ledger.persistence.appends import JobAppend, JobAppended
from ledger.persistence.sql_store import SqlStore
from ledger.runtime.ledger import Ledger
from ledger.services.submit import submit
from ledger.tools import load_tool_modules
from tests.databases import PG_ADMIN_DSN
from tests.factories import open_sql
from tests.plugins.deployments import AGENT, TOOL_MODULES, load_views


class Spied(SqlStore):
    """The same ledger, counting how each batch of appends went: "ok" or "unavailable". With
    `blip_after_commit`, the first batch commits and then the connection is reported lost: the
    writer cannot know whether its write landed (the worst kind of blip)."""

    def __init__(self, inner: SqlStore, blip_after_commit: bool) -> None:
        super().__init__(inner.engine, inner.projections)
        self.blips = 1 if blip_after_commit else 0
        self.tries: list[str] = []

    def append_jobs(self, items: Sequence[JobAppend]) -> list[JobAppended]:
        try:
            done = super().append_jobs(items)
            if self.blips:
                self.blips -= 1
                raise StorageUnavailableError("connection lost after commit (simulated)")
        except StorageUnavailableError:
            self.tries.append("unavailable")
            raise
        self.tries.append("ok")
        return done


def terminate_other_backends(url: str) -> None:
    dbname = url.rsplit("/", 1)[1]
    with psycopg.connect(PG_ADMIN_DSN, autocommit=True) as conn:
        conn.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE datname = %s AND pid <> pg_backend_pid()",
            (dbname,),
        )


def claimed_job(store: SqlStore) -> JobView:
    job = submit(Ledger(store), AGENT, JobRequest("tracker.read_issue", {"issue_ref": "T-1"})).view
    claim = work.claim(Ledger(store), job.job_id, "itest-worker", 30.0)
    assert claim.result is work.ClaimResult.CLAIMED and claim.view is not None
    return claim.view


@pytest.mark.parametrize(
    ("blip", "backend"),
    [
        ("commit_then_lost", "sqlite_database"),
        pytest.param("commit_then_lost", "pg_database", marks=pytest.mark.postgres),
        pytest.param("backend_terminated", "pg_database", marks=pytest.mark.postgres),
    ],
)
def test_the_outcome_write_survives_a_database_blip(
    blip: str, request: pytest.FixtureRequest, backend: str
) -> None:
    database_url = str(request.getfixturevalue(backend))
    load_tool_modules(TOOL_MODULES.split(","))
    real = open_sql(database_url)
    try:
        claimed = claimed_job(real)
        store = Spied(real, blip_after_commit=blip == "commit_then_lost")
        if blip == "backend_terminated":
            terminate_other_backends(database_url)  # kills the store's pooled connection
        event = NewEvent(payload=WorkSucceeded(attempt=1, result={"ok": True}), actor="w")
        recorded = work.record_outcome(Ledger(store), claimed, event)

        assert store.tries == ["unavailable", "ok"]
        assert recorded.late is False
        stream = real.read_stream(job_stream(claimed.job_id))
        assert [e.event_id for e in stream].count(event.event_id) == 1
        assert [e.type for e in stream] == ["job.accepted", "work.started", "work.succeeded"]
        assert load_views(real, [claimed.job_id])[claimed.job_id].status is Status.SUCCEEDED
    finally:
        real.close()

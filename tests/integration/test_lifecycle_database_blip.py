"""A worker's outcome write survives a database blip (issue 3).

Whether the connection is reported lost right after the commit (the writer cannot know whether
its write landed) or the Postgres backend is terminated under it, `record_outcome` retries and
the outcome is recorded exactly once: the job succeeds with no duplicate event.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import psycopg
import pytest

import ledger.services.work as work
from ledger.codes import Status
from ledger.decisions import JobRequest
from ledger.errors import StorageUnavailableError
from ledger.events import NewEvent, WorkSucceeded, job_stream
from ledger.persistence.store import SqlStore, SqlWrites
from ledger.services.ledger import Ledger
from ledger.services.submit import submit
from ledger.tools import load_tool_modules
from tests.databases import PG_ADMIN_DSN
from tests.factories import open_sql
from tests.plugins.deployments import AGENT, TOOL_MODULES, load_views


class CommitThenBlip(SqlStore):
    """The first transaction commits, then the connection is reported lost: the writer cannot
    know whether its write landed (the worst kind of blip)."""

    def __init__(self, inner: SqlStore) -> None:
        super().__init__(inner.engine, inner.projections)
        self.blips = 1

    @contextmanager
    def transaction(self) -> Iterator[SqlWrites]:
        with super().transaction() as tx:
            yield tx
        if self.blips:
            self.blips -= 1
            raise StorageUnavailableError("connection lost after commit (simulated)")


def terminate_other_backends(url: str) -> None:
    dbname = url.rsplit("/", 1)[1]
    with psycopg.connect(PG_ADMIN_DSN, autocommit=True) as conn:
        conn.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE datname = %s AND pid <> pg_backend_pid()",
            (dbname,),
        )


def claimed_job(store: SqlStore) -> tuple[str, int]:
    job = submit(Ledger(store), AGENT, JobRequest("tracker.read_issue", {"issue_ref": "T-1"})).view
    claim = work.claim(Ledger(store), job.job_id, "itest-worker", 30.0)
    assert claim.result is work.ClaimResult.CLAIMED
    return job.job_id, claim.version


@pytest.mark.parametrize(
    ("blip", "backend"),
    [
        ("commit_then_lost", "sqlite_database"),
        pytest.param("commit_then_lost", "pg_database", marks=pytest.mark.postgres),
        pytest.param("backend_terminated", "pg_database", marks=pytest.mark.postgres),
    ],
)
def test_the_outcome_write_survives_a_database_blip(
    blip: str, backend: str, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> None:
    database_url = str(request.getfixturevalue(backend))
    load_tool_modules(TOOL_MODULES.split(","))
    real = open_sql(database_url)
    try:
        job_id, version = claimed_job(real)
        store: SqlStore = CommitThenBlip(real) if blip == "commit_then_lost" else real
        tries: list[str] = []
        record_once = work._record_once

        def spy(*args: Any) -> work.Recorded:
            try:
                recorded = record_once(*args)
            except StorageUnavailableError:
                tries.append("unavailable")
                raise
            tries.append("ok")
            return recorded

        monkeypatch.setattr(work, "_record_once", spy)
        if blip == "backend_terminated":
            terminate_other_backends(database_url)  # kills the store's pooled connection
        event = NewEvent(payload=WorkSucceeded(attempt=1, result={"ok": True}), actor="w")
        recorded = work.record_outcome(Ledger(store), job_id, version, event)

        assert tries == ["unavailable", "ok"]
        assert recorded.late is False
        stream = real.read_stream(job_stream(job_id))
        assert [e.event_id for e in stream].count(event.event_id) == 1
        assert [e.type for e in stream] == ["job.accepted", "work.started", "work.succeeded"]
        assert load_views(real, [job_id])[job_id].status is Status.SUCCEEDED
    finally:
        real.close()

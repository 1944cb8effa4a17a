"""The operations contract, the metrics' read: every job counted by decision, status, code and
tool (`Reads.count_jobs`), on every store (memory, SQLite, Postgres) through `any_store`."""

from __future__ import annotations

from ledger.codes import Code
from ledger.error_info import ErrorInfo
from ledger.events import JobRefused, WorkHalted
from ledger.persistence.appends import NO_STREAM
from ledger.persistence.base import Store
from ledger.queries import JobCount
from tests.factories import accepted, failed, fresh_job_stream, new, started, succeeded


def test_count_jobs_groups_by_decision_status_code_and_tool(any_store: Store) -> None:
    brake = ErrorInfo(code=Code.BRAKE_ENGAGED, message="held", cause="b-1")
    histories = [
        [accepted(tool="a.x")],
        [accepted(tool="a.x"), started(), succeeded()],
        [accepted(tool="a.x"), started(), succeeded()],
        [accepted(tool="a.y"), started(), failed(Code.ACCESS_DENIED)],
        [accepted(tool="a.y"), new(WorkHalted(attempt=1, error=brake))],  # refused at work
        [new(JobRefused(account="acme", tool="a.y", error=brake))],  # refused at submit
    ]
    for events in histories:
        any_store.append(fresh_job_stream(), events, NO_STREAM)
    with any_store.reading() as reads:
        found = sorted(reads.count_jobs(), key=lambda c: (c.tool, c.status, c.accepted))
    assert found == [
        JobCount(True, "queued", None, "a.x", 1),
        JobCount(True, "succeeded", None, "a.x", 2),
        JobCount(True, "failed", "ACCESS_DENIED", "a.y", 1),
        JobCount(False, "refused", "BRAKE_ENGAGED", "a.y", 1),
        JobCount(True, "refused", "BRAKE_ENGAGED", "a.y", 1),
    ]


def test_count_jobs_of_an_empty_ledger(any_store: Store) -> None:
    with any_store.reading() as reads:
        assert reads.count_jobs() == []

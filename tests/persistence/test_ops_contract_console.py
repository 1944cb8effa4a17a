"""The operations contract, the console's reads: the jobs list's filters, silence (OUTCOME_MISSING
by cause), past brakes and the jobs each held, on every store through `any_store`."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from ledger.brakes import brake_error, brake_stream
from ledger.codes import Code, OutcomeMissingCause
from ledger.error_info import ErrorInfo
from ledger.events import (
    BrakePulled,
    BrakeReleased,
    JobAccepted,
    JobOutcomeMissing,
    JobRefused,
    WorkHalted,
)
from ledger.persistence.appends import NO_STREAM
from ledger.persistence.base import Store
from ledger.queries import JobFilter
from tests.factories import accepted, failed, fresh_job_stream, new, started, succeeded

EPOCH = datetime(2000, 1, 1, tzinfo=UTC)


def _missing(cause: OutcomeMissingCause) -> object:
    error = ErrorInfo(code=Code.OUTCOME_MISSING, message="silence", cause=cause.value)
    return new(JobOutcomeMissing(attempt=1, cause=cause, error=error), "reconciler")


def _spending_job() -> object:
    return new(JobAccepted(account="acme", tool="a.pay", args={"x": 1}, spends=True))


def test_jobs_filter_by_status_code_tool_spends_and_time(any_store: Store) -> None:
    histories = {
        "ok": [accepted(tool="a.x"), started(), succeeded()],
        "denied": [accepted(tool="a.y"), started(), failed(Code.ACCESS_DENIED)],
        "lost": [_spending_job(), started(), _missing(OutcomeMissingCause.WORKER_LOST)],
        "queued": [accepted(account="other", tool="a.x")],
    }
    for events in histories.values():
        any_store.append(fresh_job_stream(), events, NO_STREAM)

    def tools(**where: object) -> list[str]:
        with any_store.reading() as reads:
            found = reads.jobs(JobFilter(newest_first=True, **where))  # type: ignore[arg-type]
        return [f"{v.tool}:{v.status.value}" for v in found]

    assert tools() == ["a.x:queued", "a.pay:failed", "a.y:failed", "a.x:succeeded"]
    assert tools(status="failed") == ["a.pay:failed", "a.y:failed"]
    assert tools(code="ACCESS_DENIED") == ["a.y:failed"]
    assert tools(tool="a.x") == ["a.x:queued", "a.x:succeeded"]
    assert tools(tool="a.x", account="acme") == ["a.x:succeeded"]
    assert tools(spends=True, code="OUTCOME_MISSING") == ["a.pay:failed"]
    assert tools(since=EPOCH) == tools()
    assert tools(until=EPOCH) == []
    assert tools(since=datetime.now(UTC) + timedelta(hours=1)) == []
    assert tools(status="failed", limit=1) == ["a.pay:failed"]


def test_missing_outcomes_newest_first_with_cause_and_spends(any_store: Store) -> None:
    any_store.append(
        fresh_job_stream(), [accepted(), _missing(OutcomeMissingCause.NEVER_STARTED)], NO_STREAM
    )
    any_store.append(
        fresh_job_stream(),
        [_spending_job(), started(), _missing(OutcomeMissingCause.WORKER_LOST)],
        NO_STREAM,
    )
    any_store.append(fresh_job_stream(), [accepted(), started(), failed()], NO_STREAM)
    with any_store.reading() as reads:
        found = reads.missing_outcomes(None, EPOCH, 10)
        assert [(f.cause, f.spends) for f in found] == [
            ("worker_lost", True),
            ("never_started", False),
        ]
        assert all(f.at.tzinfo is not None for f in found)
        assert len(reads.missing_outcomes(None, EPOCH, 1)) == 1
        assert reads.missing_outcomes("other", EPOCH, 10) == []
        assert reads.missing_outcomes(None, datetime.now(UTC) + timedelta(hours=1), 10) == []


def test_recent_brakes_and_the_jobs_each_held(any_store: Store) -> None:
    ids = ["b-old", "b-new"]
    for brake_id in ids:
        pull = BrakePulled(brake_id=brake_id, scope="tool:a.x", reason="why", operator="op")
        any_store.append(brake_stream(brake_id), [new(pull)], NO_STREAM)
    release = BrakeReleased(brake_id="b-old", reason="fixed", operator="op")
    any_store.append(brake_stream("b-old"), [new(release)], 1)
    with any_store.reading() as reads:
        found = reads.recent_brakes(10)
        held_by = {b.brake_id: b for b in found}
    assert [b.brake_id for b in found] == ["b-old", "b-new"]  # the release is the newest change
    assert not held_by["b-old"].active and held_by["b-old"].released_by == "op"
    assert held_by["b-new"].active
    error = brake_error(held_by["b-new"])
    any_store.append(
        fresh_job_stream(),
        [new(JobRefused(account="acme", tool="a.x", error=error))],
        NO_STREAM,
    )
    any_store.append(
        fresh_job_stream(),
        [accepted(account="zeta"), new(WorkHalted(attempt=1, error=error))],
        NO_STREAM,
    )
    with any_store.reading() as reads:
        assert reads.jobs_held(ids) == {"b-new": 2}
        assert reads.jobs_held(ids, "acme") == {"b-new": 1}
        assert reads.jobs_held([]) == {}
        assert len(reads.recent_brakes(1)) == 1


def test_count_statuses_agrees_with_the_summary(any_store: Store) -> None:
    any_store.append(fresh_job_stream(), [accepted(tool="a.x")], NO_STREAM)
    any_store.append(fresh_job_stream(), [accepted(tool="a.x"), started(), succeeded()], NO_STREAM)
    any_store.append(fresh_job_stream(), [accepted(tool="a.y"), started(), failed()], NO_STREAM)
    with any_store.reading() as reads:
        assert reads.count_statuses(None) == {"failed": 1, "queued": 1, "succeeded": 1}
        assert reads.count_statuses(None) == reads.summarize_jobs(None).by_status
        assert reads.count_statuses("acme", "a.x") == {"queued": 1, "succeeded": 1}
        assert reads.count_statuses(None, until=EPOCH) == {}

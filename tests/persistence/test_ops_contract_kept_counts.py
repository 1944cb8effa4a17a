"""The operations contract, the kept counts (migration 0017): every count a summary, a scrape or a
status reads equals a full count over the jobs (a GROUP BY) and over the reconciler's events, on
every store through `any_store`: by every grouping, over since/until ranges that cut hours or
hold whole ones, after a rebuild, and on Postgres before and after the deltas are folded."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta, timezone

import pytest

from ledger.codes import Code, OutcomeMissingCause
from ledger.error_info import ErrorInfo
from ledger.events import (
    JobOutcomeMissing,
    JobRedispatched,
    JobRefused,
    NewEvent,
    WorkRetryScheduled,
)
from ledger.persistence import memory, sql_store, sql_writes
from ledger.persistence.appends import NO_STREAM
from ledger.persistence.base import Store
from ledger.persistence.sql_counts import hour_of, hour_start
from tests.factories import accepted, failed, fresh_job_stream, new, rebuild, started, succeeded
from tests.kept_counts import (
    assert_kept_counts_exact,
    full_findings,
    full_summary,
    kept_findings,
)

# A fixed hour, far from now: jobs are recorded at chosen moments around it.
NOON = datetime(2031, 5, 6, 12, 0, tzinfo=UTC)


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[datetime]]:
    """The moment the stores record at (and so every job's creation): set `clock[0]`."""
    moment = [NOON]
    for module in (sql_store, sql_writes, memory):
        monkeypatch.setattr(module, "now", lambda: moment[0])
    yield moment


def _record(store: Store, at: datetime, events: list[NewEvent], clock: list[datetime]) -> str:
    clock[0] = at
    stream = fresh_job_stream()
    store.append(stream, events, NO_STREAM)
    return stream


def _spread(store: Store, clock: list[datetime]) -> None:
    """Jobs of two accounts and two tools in every state, created across four hours, some on
    the hour exactly; some move on later, so their groups change after creation."""
    moments = [
        NOON - timedelta(hours=2, minutes=30),
        NOON - timedelta(hours=1),
        NOON - timedelta(minutes=20),
        NOON,
        NOON + timedelta(minutes=1, microseconds=5),
        NOON + timedelta(minutes=59, seconds=59, microseconds=999999),
        NOON + timedelta(hours=1, minutes=45),
    ]
    for i, at in enumerate(moments):
        account, tool = ("acme", "a.x") if i % 2 else ("globex", "a.y")
        _record(store, at, [accepted(account, tool)], clock)
        _record(store, at, [accepted(account, tool), started(), succeeded()], clock)
        stream = _record(store, at, [accepted("acme", "a.y"), started()], clock)
        clock[0] = at + timedelta(minutes=30)  # moves on in a later hour than its creation
        store.append(stream, [failed(Code.ACCESS_DENIED)], 2)
        brake = ErrorInfo(code=Code.BRAKE_ENGAGED, message="held", cause="b-1")
        _record(store, at, [new(JobRefused(account=account, tool=tool, error=brake))], clock)


def test_every_grouping_equals_a_full_count(any_store: Store, clock: list[datetime]) -> None:
    with any_store.reading() as reads:
        assert reads.count_jobs() == [] and reads.summarize_jobs(None).jobs == 0
    _spread(any_store, clock)
    assert_kept_counts_exact(any_store)
    with any_store.reading() as reads:
        assert reads.summarize_jobs(None).jobs == 28
        assert reads.waiting_jobs("global") == 7
        assert reads.waiting_jobs("tool:a.x") == 3
        assert reads.waiting_jobs("account:acme", "acme") == 3
        assert reads.waiting_jobs("account:acme", "globex") == 0


RANGES = [
    (None, NOON),  # before an hour, open below
    (NOON, None),  # from an hour, open above
    (NOON - timedelta(hours=1), NOON + timedelta(hours=1)),  # whole hours only
    (NOON - timedelta(minutes=20), NOON + timedelta(minutes=1)),  # partial hours at both ends
    (NOON - timedelta(minutes=21), NOON + timedelta(minutes=1, microseconds=5)),  # edges exact
    (NOON + timedelta(minutes=1), NOON + timedelta(minutes=59)),  # inside one hour
    (NOON - timedelta(hours=3), NOON + timedelta(hours=3)),  # everything, with partial ends
    (NOON + timedelta(minutes=30), NOON - timedelta(minutes=30)),  # empty: until before since
    (NOON - timedelta(minutes=50), NOON + timedelta(minutes=10)),  # two partial hours, no whole
    (None, NOON + timedelta(minutes=59, seconds=59, microseconds=999999)),  # up to a job
]


@pytest.mark.parametrize(("since", "until"), RANGES)
def test_since_and_until_are_exact_at_any_cut(
    any_store: Store, clock: list[datetime], since: datetime | None, until: datetime | None
) -> None:
    _spread(any_store, clock)
    with any_store.reading() as reads:
        for account, tool in [(None, None), ("acme", None), ("acme", "a.y"), ("globex", "a.x")]:
            kept = reads.summarize_jobs(account, tool, since, until)
            assert kept == full_summary(any_store, account, tool, since, until), (account, tool)
            assert reads.count_statuses(account, tool, since, until) == kept.by_status


def test_the_hour_arithmetic_is_whole_hours_since_1970() -> None:
    assert hour_of(datetime(1970, 1, 1, 0, 59, 59, 999999, tzinfo=UTC)) == 0
    assert hour_of(NOON) == hour_of(NOON + timedelta(minutes=59, seconds=59, microseconds=9))
    assert hour_start(hour_of(NOON)) == NOON
    assert hour_of(NOON.astimezone(timezone(timedelta(hours=2)))) == hour_of(NOON)


def _finding(payload: object, actor: str = "reconciler") -> NewEvent:
    return new(payload, actor)  # type: ignore[arg-type]


def test_the_reconcilers_findings_by_type_and_cause(
    any_store: Store, clock: list[datetime]
) -> None:
    lost = ErrorInfo(code=Code.OUTCOME_MISSING, message="silence", cause="worker_lost")
    retry = ErrorInfo(code=Code.SOURCE_UNRELIABLE, message="again", retryable=True, cause="x")
    due = NOON + timedelta(minutes=5)
    missing = JobOutcomeMissing(attempt=1, cause=OutcomeMissingCause.WORKER_LOST, error=lost)
    histories = [
        [accepted(), started(), _finding(missing)],
        [accepted(), started(), _finding(WorkRetryScheduled(attempt=1, error=retry, due_at=due))],
        [accepted(), _finding(JobRedispatched(dispatch=2, reason="r", evidence="worker_rejected"))],
        [accepted(), _finding(JobRedispatched(dispatch=2, reason="r"))],  # before evidence
        [
            accepted(),
            _finding(JobRedispatched(dispatch=2, reason="r", evidence="queue_lost"), "w-1"),
        ],
    ]
    for i, events in enumerate(histories):
        _record(any_store, NOON + timedelta(minutes=i), events, clock)
    with any_store.reading() as reads:
        kept = kept_findings(reads.count_findings())
    assert kept == full_findings(any_store)
    assert {key: n for key, (n, _) in kept.items()} == {
        ("job.outcome_missing", "worker_lost"): 1,
        ("work.retry_scheduled", "x"): 1,
        ("job.redispatched", "worker_rejected"): 1,
        ("job.redispatched", "dispatch_deadline"): 1,
    }
    assert max(last for _, last in kept.values()) == NOON + timedelta(minutes=3)


def test_a_rebuild_leaves_the_counts_exact(any_store: Store, clock: list[datetime]) -> None:
    _spread(any_store, clock)
    before = full_summary(any_store)
    rebuild(any_store)  # online: its rows go through the same counting as any write
    assert_kept_counts_exact(any_store)
    with any_store.reading() as reads:
        assert reads.summarize_jobs(None) == before
    # And what is written after it is counted as before.
    _record(any_store, NOON, [accepted("initech", "a.z")], clock)
    assert_kept_counts_exact(any_store)


def test_folding_the_deltas_changes_no_count(any_store: Store, clock: list[datetime]) -> None:
    _spread(any_store, clock)
    with any_store.reading() as reads:
        before = (
            reads.count_jobs(),
            reads.summarize_jobs(None, since=NOON),
            reads.count_findings(),
        )
    folded = any_store.compact_counts()
    assert folded > 0 if any_store.dialect == "postgresql" else folded == 0
    assert any_store.compact_counts() == 0  # nothing left to fold
    with any_store.reading() as reads:
        after = (reads.count_jobs(), reads.summarize_jobs(None, since=NOON), reads.count_findings())
    assert after == before
    assert_kept_counts_exact(any_store)

"""The job contract: batches of job appends (`append_jobs`), as submit, claim and
record use them. Runs on every store; on Postgres the batch is one server-side statement, so
these tests also prove that its read-model row equals the Python fold and a rebuild."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

from ledger.access import token_stream
from ledger.codes import Code, Status
from ledger.events import BrakePulled, TokenCreated, TokenRevoked, job_stream
from ledger.persistence.appends import (
    NO_STREAM,
    AppendStatus,
    JobAppend,
    LeaseChange,
    QuotaCheck,
)
from ledger.persistence.base import Store
from ledger.queries import JobFilter
from tests.factories import accepted, failed, new, rebuild, started, succeeded
from tests.store_helpers import renew_lease


def new_job() -> str:
    return str(uuid.uuid4())


def stored(store: Store, job_id: str) -> object:
    with store.reading() as reads:
        return reads.job(job_id)


def test_a_batch_appends_new_and_next_events_and_returns_their_views(any_store: Store) -> None:
    first, second = new_job(), new_job()
    done = any_store.append_jobs(
        [JobAppend(first, [accepted()], None), JobAppend(second, [accepted()], None)]
    )
    assert [r.status for r in done] == [AppendStatus.OK, AppendStatus.OK]
    assert done[0].job.ledger_position < done[1].job.ledger_position
    assert [stored(any_store, j) for j in (first, second)] == [r.job for r in done]
    expires = datetime.now(UTC) + timedelta(seconds=30)
    lease = LeaseChange("start", 1, "w-1", expires)
    claimed = any_store.append_jobs([JobAppend(first, [started()], done[0].job, lease)])[0]
    assert claimed.status is AppendStatus.OK and claimed.job.status is Status.RUNNING
    assert claimed.appended is not None
    (event,) = claimed.appended.events
    assert any_store.read_stream(job_stream(first))[-1] == event
    assert event.prev_hash == done[0].appended.events[0].hash  # type: ignore[union-attr]
    with any_store.transaction() as tx:  # the lease opened with the append
        assert renew_lease(tx, first, 1, expires)
    drop = LeaseChange("drop", 1)
    ended = any_store.append_jobs([JobAppend(first, [succeeded()], claimed.job, drop)])[0]
    assert ended.job.status is Status.SUCCEEDED and stored(any_store, first) == ended.job
    with any_store.transaction() as tx:
        assert not renew_lease(tx, first, 1, expires)


def test_an_item_that_cannot_be_appended_says_why_and_the_rest_commit(any_store: Store) -> None:
    job, other, keyed = new_job(), new_job(), new_job()
    view = any_store.append_jobs([JobAppend(job, [accepted()], None)])[0].job
    moved = any_store.append_jobs([JobAppend(job, [started()], view)])[0].job
    done_view = any_store.append_jobs([JobAppend(job, [failed(Code.ACCESS_DENIED)], moved)])[0]
    key = accepted()
    key = new(key.payload.model_copy(update={"idempotency_key": "k-1"}))
    any_store.append_jobs([JobAppend(keyed, [key], None)])
    again = new(key.payload)
    results = any_store.append_jobs(
        [
            JobAppend(job, [started()], view),  # a stale view: the stream moved since
            JobAppend(job, [succeeded()], done_view.job),  # a second terminal outcome
            JobAppend(other, [accepted()], None),  # fine
            JobAppend(new_job(), [again], None),  # the account's key is held
        ]
    )
    assert [r.status for r in results] == [
        AppendStatus.CONFLICT,
        AppendStatus.TERMINAL,
        AppendStatus.OK,
        AppendStatus.IDEMPOTENCY,
    ]
    assert results[3].holder is not None and results[3].holder == stored(any_store, keyed)
    assert stored(any_store, other) == results[2].job
    assert len(any_store.read_stream(job_stream(job))) == 3


def test_a_retried_write_is_a_duplicate_not_a_second_event(any_store: Store) -> None:
    job = new_job()
    first = accepted()
    view = any_store.append_jobs([JobAppend(job, [first], None)])[0].job
    retry = new(started().payload)
    retry = retry.model_copy(update={"event_id": first.event_id})
    (result,) = any_store.append_jobs([JobAppend(job, [retry], view)])
    assert result.status is AppendStatus.DUPLICATE
    assert len(any_store.read_stream(job_stream(job))) == 1


def test_a_submit_is_refused_as_braked_while_a_brake_holds_its_scope(any_store: Store) -> None:
    pulled = BrakePulled(brake_id=str(uuid.uuid4()), scope="tool:a.x", reason="r", operator="o")
    any_store.append(f"brake-{pulled.brake_id}", [new(pulled)], NO_STREAM)
    job = new_job()
    scopes = ("global", "tool:a.x", "account:acme")
    (held,) = any_store.append_jobs([JobAppend(job, [accepted()], None, brake_scopes=scopes)])
    assert held.status is AppendStatus.BRAKED
    assert [b.brake_id for b in held.brakes] == [pulled.brake_id]
    assert stored(any_store, job) is None and any_store.read_stream(job_stream(job)) == []
    free = ("global", "tool:a.y", "account:acme")
    (ok,) = any_store.append_jobs([JobAppend(job, [accepted()], None, brake_scopes=free)])
    assert ok.status is AppendStatus.OK


def test_the_batched_read_models_equal_the_fold_and_a_rebuild(any_store: Store) -> None:
    jobs = [new_job() for _ in range(4)]
    views = {
        j: r.job
        for j, r in zip(
            jobs,
            any_store.append_jobs([JobAppend(j, [accepted()], None) for j in jobs]),
            strict=True,
        )
    }
    views |= {
        r.job.job_id: r.job
        for r in any_store.append_jobs([JobAppend(j, [started()], views[j]) for j in jobs[:3]])
    }
    outcomes = [succeeded(), failed(Code.SOURCE_UNRELIABLE)]
    for job, outcome in zip(jobs[:2], outcomes, strict=True):
        views[job] = any_store.append_jobs([JobAppend(job, [outcome], views[job])])[0].job
    with any_store.reading() as reads:
        live = {v.job_id: v for v in reads.jobs(JobFilter(limit=100))}
    assert live == views
    rebuild(any_store)
    with any_store.reading() as reads:
        rebuilt = {v.job_id: v for v in reads.jobs(JobFilter(limit=100))}
    assert rebuilt == views


def test_an_item_of_a_revoked_token_is_refused_and_writes_nothing(any_store: Store) -> None:
    """A submit whose token was admitted without a read names it (`token_id`): the append
    refuses it once the token is revoked, in the same batch as items it does not touch."""
    token = uuid.uuid4().hex
    created = TokenCreated(
        token_id=token, account="acme", role="agent", token_hash="ab" * 32, tools=None
    )
    any_store.append(token_stream(token), [new(created, "operator:alice")], NO_STREAM)
    good, late, stranger, plain = new_job(), new_job(), new_job(), new_job()
    done = any_store.append_jobs([JobAppend(good, [accepted()], None, token_id=token)])
    assert done[0].status is AppendStatus.OK
    any_store.append(token_stream(token), [new(TokenRevoked(token_id=token), "operator:alice")], 1)
    done = any_store.append_jobs(
        [
            JobAppend(late, [accepted()], None, token_id=token),
            JobAppend(stranger, [accepted()], None, token_id="no-such-token"),
            JobAppend(plain, [accepted()], None),  # no token named: not checked
        ]
    )
    assert [r.status for r in done] == [
        AppendStatus.REVOKED,
        AppendStatus.REVOKED,
        AppendStatus.OK,
    ]
    assert stored(any_store, late) is None and stored(any_store, stranger) is None
    assert any_store.read_stream(job_stream(late)) == []
    assert stored(any_store, good) is not None and stored(any_store, plain) is not None


def test_a_quota_counts_the_window_and_this_batchs_own_jobs(any_store: Store) -> None:
    """A new job's quota: counted under the account's and tool's lock, in the window, with the
    jobs the same batch wrote before it; another tool or account, a key's replay (answered
    first) and a window that holds none are not held back by it."""
    since = datetime.now(UTC) - timedelta(hours=1)
    quota = QuotaCheck(limit=2, since=since)
    first = any_store.append_jobs([JobAppend(new_job(), [accepted()], None, quota=quota)])[0]
    keyed = new(accepted().payload.model_copy(update={"idempotency_key": "q-1"}))
    batch = [
        JobAppend(new_job(), [keyed], None, quota=quota),  # the second: room for it
        JobAppend(new_job(), [accepted()], None, quota=quota),  # the third: over
        JobAppend(new_job(), [accepted(tool="other.tool")], None, quota=quota),
        JobAppend(new_job(), [accepted(account="beta")], None, quota=quota),
        JobAppend(new_job(), [new(keyed.payload)], None, quota=quota),  # a replay's key
    ]
    results = any_store.append_jobs(batch)
    assert [r.status for r in results] == [
        AppendStatus.OK,
        AppendStatus.QUOTA,
        AppendStatus.OK,
        AppendStatus.OK,
        AppendStatus.IDEMPOTENCY,
    ]
    assert results[1].oldest == first.job.created_at  # the window frees when it leaves
    assert stored(any_store, batch[1].job_id) is None  # nothing written for it
    assert results[4].holder == stored(any_store, batch[0].job_id)
    later = QuotaCheck(limit=2, since=datetime.now(UTC))  # a window that holds none of them
    assert (
        any_store.append_jobs([JobAppend(new_job(), [accepted()], None, quota=later)])[0].status
        is AppendStatus.OK
    )

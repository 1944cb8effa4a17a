"""The job contract: read models, leases and the questions a job's way asks.
Runs on every store (memory, SQLite, Postgres) through `any_store`."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

from ledger.access import hash_token
from ledger.codes import Code, Status
from ledger.error_info import ErrorInfo
from ledger.events import (
    BrakePulled,
    BrakeReleased,
    JobRefused,
    TokenCreated,
    TokenRevoked,
    WorkRetryScheduled,
    WorkStarted,
    job_id_of,
)
from ledger.persistence.appends import NO_STREAM
from ledger.persistence.base import BRAKES_LOCK, Store
from ledger.queries import EventFilter, JobFilter
from tests.factories import accepted, failed, fresh_job_stream, new, started, succeeded
from tests.store_helpers import renew_lease


def a_job(store: Store, account: str = "acme", tool: str = "tracker.read_issue") -> str:
    stream = fresh_job_stream()
    store.append(stream, [accepted(account=account, tool=tool)], NO_STREAM)
    return job_id_of(stream)


def test_jobs_page_in_position_order_scoped_to_an_account(any_store: Store) -> None:
    ids = [a_job(any_store, account) for account in ("acme", "beta", "acme", "acme")]
    with any_store.reading() as reads:
        everything = reads.jobs(JobFilter(limit=10))
        acme = reads.jobs(JobFilter(account="acme", limit=10))
        after = reads.jobs(JobFilter(account="acme", after=acme[0].ledger_position, limit=1))
    assert [v.job_id for v in everything] == ids
    with any_store.reading() as reads:
        some = reads.jobs_by_id([ids[1], ids[3], str(uuid.uuid4()), ids[1]])
    assert {k: v.account for k, v in some.items()} == {ids[1]: "beta", ids[3]: "acme"}
    with any_store.transaction() as tx:  # a claim's read (its own way on Postgres)
        assert tx.jobs_by_id([str(uuid.uuid4()), ids[3], ids[1], ids[3]]) == some
        assert tx.jobs_by_id([]) == {}
    assert [v.job_id for v in acme] == [ids[0], ids[2], ids[3]]
    assert [v.job_id for v in after] == [ids[2]]


def test_jobs_newest_first_and_before_a_position(any_store: Store) -> None:
    ids = [a_job(any_store, account) for account in ("acme", "beta", "acme", "acme")]
    with any_store.reading() as reads:
        newest = reads.jobs(JobFilter(limit=10, newest_first=True))
        top = reads.jobs(JobFilter(account="acme", limit=1, newest_first=True))
        below = reads.jobs(
            JobFilter(account="acme", before=top[0].ledger_position, newest_first=True)
        )
        window = reads.jobs(
            JobFilter(after=newest[3].ledger_position, before=newest[0].ledger_position)
        )
    assert [v.job_id for v in newest] == ids[::-1]
    assert [v.job_id for v in top] == [ids[3]]
    assert [v.job_id for v in below] == [ids[2], ids[0]]
    assert [v.job_id for v in window] == [ids[1], ids[2]]


def test_the_last_event_by_an_actor(any_store: Store) -> None:
    first, second = fresh_job_stream(), fresh_job_stream()
    any_store.append(first, [accepted(), new(started().payload, "reconciler")], NO_STREAM)
    any_store.append(second, [accepted(), started()], NO_STREAM)
    with any_store.reading() as reads:
        found = reads.last_event_by("reconciler")
        assert reads.last_event_by("nobody") is None
    assert found is not None and (found.stream_id, found.type) == (first, "work.started")


def test_a_changed_job_moves_to_the_end_of_the_page(any_store: Store) -> None:
    first, second = a_job(any_store), a_job(any_store)
    any_store.append(f"job-{first}", [started()], 1)
    with any_store.reading() as reads:
        assert [v.job_id for v in reads.jobs(JobFilter())] == [second, first]
        positions = reads.job_positions([first, second, str(uuid.uuid4())])
    assert set(positions) == {first, second} and positions[first] > positions[second]


def test_accepted_in_window_counts_one_account_and_tool(any_store: Store) -> None:
    before = datetime.now(UTC) - timedelta(seconds=1)
    for account, tool in [("acme", "a.x"), ("acme", "a.x"), ("acme", "a.y"), ("beta", "a.x")]:
        a_job(any_store, account, tool)
    error = ErrorInfo(code=Code.QUOTA_EXCEEDED, message="used up")
    refused = JobRefused(account="acme", tool="a.x", error=error)  # refusals do not count
    any_store.append(fresh_job_stream(), [new(refused)], NO_STREAM)
    with any_store.reading() as reads:
        count, oldest = reads.accepted_in_window("acme", "a.x", before)
        none, nothing = reads.accepted_in_window("acme", "a.x", datetime.now(UTC))
    assert count == 2 and oldest is not None and oldest > before
    assert (none, nothing) == (0, None)


def test_summary_counts_by_status_code_tool_and_account(any_store: Store) -> None:
    done, broken = fresh_job_stream(), fresh_job_stream()
    any_store.append(done, [accepted(), started(), succeeded()], NO_STREAM)
    any_store.append(broken, [accepted(account="beta"), started(), failed(Code.ACCESS_DENIED)])
    a_job(any_store, tool="mail.send")
    with any_store.reading() as reads:
        everything = reads.summarize_jobs(None)
        beta = reads.summarize_jobs("beta")
        later = reads.summarize_jobs(None, since=datetime.now(UTC) + timedelta(hours=1))
    assert everything.jobs == 3
    assert everything.by_status == {"failed": 1, "queued": 1, "succeeded": 1}
    assert everything.by_code == {"ACCESS_DENIED": 1}
    assert everything.by_tool == {"mail.send": 1, "tracker.read_issue": 2}
    assert everything.by_account == {"acme": 2, "beta": 1}
    assert (beta.jobs, beta.by_status) == (1, {"failed": 1})
    assert later.jobs == 0


def test_overdue_jobs_are_waiting_past_their_deadline_or_running_past_their_lease(
    any_store: Store,
) -> None:
    now_ = datetime.now(UTC)
    queued, legacy = fresh_job_stream(), fresh_job_stream()
    any_store.append(queued, [accepted(start_within_s=60)], NO_STREAM)
    any_store.append(legacy, [accepted()], NO_STREAM)  # no deadline recorded: always judged
    retrying = fresh_job_stream()
    any_store.append(retrying, [accepted(start_within_s=60), started()], NO_STREAM)
    error = failed().payload.error  # type: ignore[attr-defined]
    retry = WorkRetryScheduled(attempt=1, error=error, due_at=now_)
    any_store.append(retrying, [new(retry)], 2)
    lost, alive = fresh_job_stream(), fresh_job_stream()
    for stream, lease_s in ((lost, -5.0), (alive, -5.0)):
        any_store.append(stream, [accepted(), started(lease_s=lease_s)], NO_STREAM)
    with any_store.transaction() as tx:  # alive's worker renewed its lease
        tx.start_lease(job_id_of(alive), 1, "w-1", now_ + timedelta(seconds=120))
    soon = datetime.now(UTC) + timedelta(seconds=1)
    past_deadlines = now_ + timedelta(seconds=61)
    with any_store.reading() as reads:
        none_yet = reads.overdue_jobs(soon, None)
        found = reads.overdue_jobs(past_deadlines, None)
    assert {o.view.job_id for o in none_yet} == {job_id_of(lost), job_id_of(legacy)}
    by_id = {o.view.job_id: o for o in found}
    assert set(by_id) == {job_id_of(s) for s in (queued, legacy, retrying, lost)}
    assert by_id[job_id_of(lost)].lease_expires_at is None  # it never held a lease row
    assert all(o.dispatch is None for o in found)  # no message of theirs was confirmed


def test_a_lease_belongs_to_one_attempt(any_store: Store) -> None:
    now_ = datetime.now(UTC)
    job = a_job(any_store)
    expires = now_ + timedelta(seconds=30)
    with any_store.transaction() as tx:
        tx.start_lease(job, 1, "w-1", expires)
        assert renew_lease(tx, job, 1, expires + timedelta(seconds=5))
        assert not renew_lease(tx, job, 2, expires)
        tx.start_lease(job, 2, "w-2", expires)  # the next attempt replaces the first
        assert not renew_lease(tx, job, 1, expires)
        tx.drop_lease(job, 1)  # not its attempt: nothing happens
        assert renew_lease(tx, job, 2, expires)
        tx.drop_lease(job, 2)
        assert not renew_lease(tx, job, 2, expires)
        tx.lock(BRAKES_LOCK, shared=True)  # a named lock is always available to take
        tx.lock("quota", "acme", "a.x")


def test_leases_renewed_together_each_answer_for_its_own_attempt(any_store: Store) -> None:
    """A worker renews the leases of its running tools in one statement: each pair is
    renewed only while the lease is that attempt's, and the answers keep the pairs' order."""
    start = datetime.now(UTC)
    mine, moved_on, gone = (fresh_job_stream() for _ in range(3))
    for stream in (mine, moved_on, gone):
        any_store.append(stream, [accepted(), started(lease_s=-5.0)], NO_STREAM)
    a, b, c = (job_id_of(s) for s in (mine, moved_on, gone))
    unknown = str(uuid.uuid4())
    with any_store.transaction() as tx:
        for job in (a, b, c):
            tx.start_lease(job, 1, "w-1", start - timedelta(seconds=5))  # lapsed already
        tx.start_lease(b, 2, "w-2", start - timedelta(seconds=5))  # a later attempt's now
        tx.drop_lease(c, 1)
    later = start + timedelta(seconds=60)
    with any_store.transaction() as tx:
        held = [(a, 1), (b, 1), (c, 1), (unknown, 1), (a, 1), (b, 2)]
        assert tx.renew_leases(held, later) == [True, False, False, False, True, True]
        assert tx.renew_leases([], later) == []
    with any_store.reading() as reads:
        overdue = {o.view.job_id for o in reads.overdue_jobs(start + timedelta(seconds=1), None)}
    assert a not in overdue and b not in overdue  # both renewed past the moment asked about
    assert c in overdue  # no lease left to renew: the reconciler judges it


def test_brakes_active_released_and_the_jobs_they_hold(any_store: Store) -> None:
    a_job(any_store, "acme", "mail.send")
    a_job(any_store, "beta", "mail.send")
    a_job(any_store, "acme", "tracker.read_issue")
    pulled = [
        BrakePulled(brake_id=str(uuid.uuid4()), scope=scope, reason="r", operator="op")
        for scope in ("tool:mail.send", "account:acme", "global")
    ]
    for brake in pulled:
        any_store.append(f"brake-{brake.brake_id}", [new(brake)], NO_STREAM)
    released = BrakeReleased(brake_id=pulled[2].brake_id, reason="ok", operator="op")
    appended = any_store.append(f"brake-{released.brake_id}", [new(released)], 1)
    assert appended.brake.active is False
    with any_store.reading() as reads:
        active = reads.active_brakes()
        assert [b.brake_id for b in active] == [pulled[0].brake_id, pulled[1].brake_id]
        assert reads.brake(pulled[2].brake_id) == appended.brake
        assert reads.brake(str(uuid.uuid4())) is None
        assert reads.waiting_jobs("tool:mail.send") == 2
        assert reads.waiting_jobs("tool:mail.send", account="beta") == 1
        assert reads.waiting_jobs("account:acme") == 2
        assert reads.waiting_jobs("global") == 3


def test_tokens_by_id_and_by_hash(any_store: Store) -> None:
    made = [
        TokenCreated(token_id=str(uuid.uuid4()), account=a, role="agent", token_hash=hash_token(a))
        for a in ("acme", "beta")
    ]
    for token in made:
        any_store.append(f"token-{token.token_id}", [new(token)], NO_STREAM)
    revoked = any_store.append(
        f"token-{made[1].token_id}", [new(TokenRevoked(token_id=made[1].token_id))], 1
    ).token
    with any_store.reading() as reads:
        assert [t.token_id for t in reads.tokens()] == [t.token_id for t in made]
        assert reads.token(made[1].token_id) == revoked and revoked.revoked
        assert reads.token_by_hash(hash_token("beta")) == revoked  # revoked ones too
        assert reads.token_by_hash(hash_token("nobody")) is None


def test_read_job_answers_the_view_and_whether_the_token_stands(any_store: Store) -> None:
    made = [
        TokenCreated(token_id=str(uuid.uuid4()), account="acme", role="agent", token_hash=h)
        for h in (hash_token("kept"), hash_token("revoked"))
    ]
    for token in made:
        any_store.append(f"token-{token.token_id}", [new(token)], NO_STREAM)
    kept, revoked = (t.token_id for t in made)
    any_store.append(f"token-{revoked}", [new(TokenRevoked(token_id=revoked))], 1)
    job = a_job(any_store)
    with any_store.reading() as reads:
        expected = reads.job(job)
    assert expected is not None
    assert any_store.read_job(job) == (expected, True)
    assert any_store.read_job(job, kept) == (expected, True)
    assert any_store.read_job(job, revoked) == (expected, False)
    assert any_store.read_job(job, str(uuid.uuid4())) == (expected, False)  # no such token
    assert any_store.read_job(str(uuid.uuid4()), kept) == (None, True)
    assert any_store.read_job(str(uuid.uuid4()), revoked) == (None, False)


def test_find_events_filters_and_pages(any_store: Store) -> None:
    acme, beta = fresh_job_stream(), fresh_job_stream()
    any_store.append(acme, [accepted(), started(), failed(Code.ACCESS_DENIED)], NO_STREAM)
    any_store.append(beta, [accepted(account="beta", tool="mail.send")], NO_STREAM)
    brake = BrakePulled(brake_id=str(uuid.uuid4()), scope="global", reason="r", operator="op")
    any_store.append(f"brake-{brake.brake_id}", [new(brake)], NO_STREAM)

    def find(**where: object) -> list[tuple[str, str]]:
        with any_store.in_order() as reads:
            found = reads.find_events(EventFilter(**where))  # type: ignore[arg-type]
        return [(e.stream_id, e.type) for e in found]

    assert len(find()) == 5
    assert find(account="beta") == [(beta, "job.accepted")]
    assert find(tool="tracker.read_issue", type="work.started") == [(acme, "work.started")]
    assert find(code="ACCESS_DENIED") == [(acme, "work.failed")]
    assert find(limit=2) == [(acme, "job.accepted"), (acme, "work.started")]
    first = any_store.read_stream(acme)[0]
    assert find(after=first.position, limit=1) == [(acme, "work.started")]
    assert find(since=datetime.now(UTC) + timedelta(hours=1)) == []
    assert len(find(until=datetime.now(UTC) + timedelta(hours=1))) == 5


def test_a_job_view_carries_its_lease_and_retry_times(any_store: Store) -> None:
    now_ = datetime.now(UTC)
    stream = fresh_job_stream()
    lease = now_ + timedelta(seconds=30)
    any_store.append(stream, [accepted()], NO_STREAM)
    started_view = any_store.append(
        stream, [new(WorkStarted(attempt=1, worker="w", lease_expires_at=lease))], 1
    ).job
    assert (started_view.status, started_view.lease_expires_at) == (Status.RUNNING, lease)
    with any_store.reading() as reads:
        assert reads.job(job_id_of(stream)) == started_view

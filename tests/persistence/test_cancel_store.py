"""The cancel on every store (memory, SQLite, Postgres): its `work.declined` is appended after the
version it read, so a cancel that read a view the stream has moved past conflicts and records
nothing; a second terminal is refused.

A cancel racing a worker's claim, on SQLite and Postgres, in one process with two threads:
both append after the version they read, so exactly one wins every time. Either the claim
committed first (the job started, the cancel is refused NOT_CANCELLABLE) or the cancel did
(the job is declined, and the claim skips it: it never starts). The stream and the stored
view agree either way, and `audit verify` proves the read models."""

from __future__ import annotations

import threading
from collections import Counter

from ledger.codes import Status
from ledger.decisions import Caller, JobRequest
from ledger.errors import NotCancellableError
from ledger.events import Cancellation, NewEvent, WorkDeclined, job_stream
from ledger.job_view import JobView
from ledger.persistence.appends import AppendStatus, JobAppend
from ledger.persistence.base import Store
from ledger.runtime.ledger import Ledger
from ledger.services.cancel import Canceller, cancel
from ledger.services.submit import submit
from ledger.services.work import Claim, ClaimResult, claim
from tests.factories import get_job, verify_store
from tests.tools import ECHO

ROUNDS = 30
AGENT = Caller(account="acme", token_id="tok-acme")
BY_AGENT = Canceller("acme", "agent", "tok-acme")
JOIN_S = 30.0


def test_a_cancel_appends_after_the_version_it_read(any_store: Store) -> None:
    ledger = Ledger(any_store)
    job_id = submit(ledger, AGENT, JobRequest(ECHO, {"text": "x"})).view.job_id
    queued = get_job(ledger, job_id)
    assert queued is not None
    claimed = claim(ledger, job_id, "w-1", 30)
    assert claimed.result is ClaimResult.CLAIMED
    declined = WorkDeclined(
        attempt=0, reason="late cancel", cancelled=Cancellation(account="acme", role="agent")
    )
    stale = JobAppend(job_id, [NewEvent(payload=declined, actor="tok-acme")], queued)
    assert any_store.append_jobs([stale])[0].status is AppendStatus.CONFLICT
    assert get_job(ledger, job_id) == claimed.view  # nothing recorded by the stale cancel

    other = submit(ledger, AGENT, JobRequest(ECHO, {"text": "y"})).view.job_id
    view = cancel(ledger, other, BY_AGENT)
    assert get_job(ledger, other) == view and view.status is Status.DECLINED
    again = JobAppend(other, [NewEvent(payload=declined, actor="tok-acme")], view)
    assert any_store.append_jobs([again])[0].status is AppendStatus.TERMINAL
    assert claim(ledger, other, "w-1", 30).result is ClaimResult.SKIPPED
    assert len(any_store.read_stream(job_stream(other))) == 2


def race(ledger: Ledger, job_id: str) -> tuple[Claim, JobView | NotCancellableError]:
    """Claim and cancel the job at once (a barrier releases both threads together)."""
    start = threading.Barrier(2)
    answers: dict[str, object] = {}

    def claiming() -> None:
        start.wait(JOIN_S)
        answers["claim"] = claim(ledger, job_id, "w-1", 30)

    def cancelling() -> None:
        start.wait(JOIN_S)
        try:
            answers["cancel"] = cancel(ledger, job_id, BY_AGENT, "race")
        except NotCancellableError as refused:
            answers["cancel"] = refused

    threads = [threading.Thread(target=claiming), threading.Thread(target=cancelling)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(JOIN_S)
    assert not any(t.is_alive() for t in threads), "a racer did not finish"
    claimed, cancelled = answers["claim"], answers["cancel"]
    assert isinstance(claimed, Claim)
    assert isinstance(cancelled, JobView | NotCancellableError)
    return claimed, cancelled


def test_exactly_one_of_a_claim_and_a_cancel_wins(ledger: Ledger) -> None:
    winners: Counter[str] = Counter()
    for _ in range(ROUNDS):
        job_id = submit(ledger, AGENT, JobRequest(ECHO, {"text": "x"})).view.job_id
        claimed, cancelled = race(ledger, job_id)
        types = [e.type for e in ledger.store.read_stream(job_stream(job_id))]
        stored = get_job(ledger, job_id)
        assert stored is not None
        if claimed.result is ClaimResult.CLAIMED:
            # Started, then the cancel refused: the job runs, nothing else was recorded.
            assert isinstance(cancelled, NotCancellableError), cancelled
            assert cancelled.envelope["status"] == "running"
            assert types == ["job.accepted", "work.started"]
            assert stored.status is Status.RUNNING and stored.cancelled is None
            winners["claim"] += 1
        else:
            # Cancelled, and the claim skipped it: it never started.
            assert claimed.result is ClaimResult.SKIPPED, claimed
            assert isinstance(cancelled, JobView) and cancelled == stored
            assert types == ["job.accepted", "work.declined"]
            assert stored.status is Status.DECLINED and stored.cancelled is not None
            assert stored.attempts == 0
            winners["cancel"] += 1
    assert sum(winners.values()) == ROUNDS
    report = verify_store(ledger)
    assert report.ok, report

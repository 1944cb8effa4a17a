"""Cancelling a call that has not started, on a ledger in memory: a queued or retry-waiting job
ends declined on purpose and never runs; a running or ended job is refused with its envelope
and left as it was; a second cancel answers as the first; the reconciler and the outbox leave a
cancelled job alone."""

from __future__ import annotations

import pytest

from ledger.codes import NextAction, Status
from ledger.decisions import Caller, JobRequest
from ledger.errors import InvalidEventError, JobNotFoundError, NotCancellableError
from ledger.events import WorkDeclined, job_stream
from ledger.job_view import envelope
from ledger.queueing import DEFAULT_START_WITHIN_S
from ledger.runtime.ledger import Ledger
from ledger.runtime.outbox import Outbox
from ledger.services.cancel import Canceller, cancel
from ledger.services.execute import Executor
from ledger.services.reconcile import reconcile_once
from ledger.services.submit import submit
from ledger.services.work import ClaimResult, claim
from tests.factories import Recorder, get_job
from tests.services.test_reconcile import POLICY, later
from tests.tools import ECHO, RECONCILE_READS

AGENT = Caller(account="acme", token_id="tok-acme")
BY_AGENT = Canceller("acme", "agent", "tok-acme")


def queued(ledger: Ledger, tool: str = ECHO, sender: object = None) -> str:
    args = {"text": "hi"} if tool == ECHO else {}
    request = JobRequest(tool, args)
    return submit(ledger, AGENT, request, sender).view.job_id  # type: ignore[arg-type]


def test_a_queued_job_ends_declined_on_purpose_and_never_runs(memory_ledger: Ledger) -> None:
    job_id = queued(memory_ledger)
    view = cancel(memory_ledger, job_id, BY_AGENT, "the user changed their mind")
    shown = envelope(view)
    assert (shown.status, shown.terminal, shown.next_action, shown.attempts) == (
        Status.DECLINED,
        True,
        NextAction.ACCEPT,
        0,
    )
    assert shown.recorded_by == "api"
    assert shown.declined_reason == (
        "Cancelled by an agent token of account acme before any worker started it: the user "
        "changed their mind. Nothing ran."
    )
    _accepted, declined = memory_ledger.store.read_stream(job_stream(job_id))
    assert (declined.type, declined.stream_version, declined.actor) == (
        "work.declined",
        2,
        "tok-acme",
    )
    payload = declined.payload
    assert isinstance(payload, WorkDeclined) and payload.cancelled is not None
    assert (payload.cancelled.account, payload.cancelled.role, payload.attempt) == (
        "acme",
        "agent",
        0,
    )
    # Its message, when a worker gets it, is dropped: the claim skips it and nothing runs.
    done = Executor(memory_ledger, "w-1").execute(job_id)
    assert done.claim is ClaimResult.SKIPPED
    assert len(memory_ledger.store.read_stream(job_stream(job_id))) == 2


def test_a_second_cancel_answers_as_the_first(memory_ledger: Ledger) -> None:
    job_id = queued(memory_ledger)
    first = cancel(memory_ledger, job_id, BY_AGENT, "first")
    again = cancel(memory_ledger, job_id, Canceller.operator("olga"), "second")
    assert again == first
    assert len(memory_ledger.store.read_stream(job_stream(job_id))) == 2


def test_a_job_waiting_for_its_retry_can_be_cancelled(memory_ledger: Ledger) -> None:
    job_id = queued(memory_ledger, "itest.flaky_changing")
    Executor(memory_ledger, "w-1", Recorder()).execute(job_id)
    assert get_job(memory_ledger, job_id).status is Status.RETRYING  # type: ignore[union-attr]
    view = cancel(memory_ledger, job_id, Canceller.operator("olga"))
    assert (view.status, view.attempts, view.due_at, view.next_action) == (
        Status.DECLINED,
        1,
        None,
        NextAction.ACCEPT,
    )
    assert view.declined_reason == (
        "Cancelled by operator olga at the command line before any worker started it. Nothing ran."
    )
    assert Executor(memory_ledger, "w-2").execute(job_id).claim is ClaimResult.SKIPPED


def test_a_running_job_is_refused_with_its_envelope_and_goes_on(memory_ledger: Ledger) -> None:
    job_id = queued(memory_ledger)
    claimed = claim(memory_ledger, job_id, "w-1", 30)
    with pytest.raises(NotCancellableError) as refused:
        cancel(memory_ledger, job_id, BY_AGENT)
    assert (refused.value.status, refused.value.envelope["status"]) == ("running", "running")
    assert get_job(memory_ledger, job_id) == claimed.view  # left as it was
    finished = Executor(memory_ledger, "w-1").finish(job_id, claimed)
    assert finished.status is Status.SUCCEEDED


def test_an_ended_job_is_refused(memory_ledger: Ledger) -> None:
    job_id = queued(memory_ledger)
    Executor(memory_ledger, "w-1").execute(job_id)
    with pytest.raises(NotCancellableError) as refused:
        cancel(memory_ledger, job_id, BY_AGENT)
    assert refused.value.envelope["status"] == "succeeded"


@pytest.mark.parametrize("job_id", ["not-a-uuid", "00000000-0000-4000-8000-000000000000"])
def test_an_unknown_job_is_not_found(memory_ledger: Ledger, job_id: str) -> None:
    with pytest.raises(JobNotFoundError):
        cancel(memory_ledger, job_id, BY_AGENT)


def test_another_accounts_job_is_not_found_and_left_alone(memory_ledger: Ledger) -> None:
    job_id = queued(memory_ledger)
    for other in (Canceller("globex", "agent", "tok-g"), Canceller("globex", "operator", "op")):
        with pytest.raises(JobNotFoundError):
            cancel(memory_ledger, job_id, other)
    cancel(memory_ledger, job_id, Canceller("*", "operator", "tok-op"))  # an operator of all
    assert get_job(memory_ledger, job_id).status is Status.DECLINED  # type: ignore[union-attr]


@pytest.mark.parametrize("reason", ["x" * 501, "line\nbreak", "bidi\u202eflip"])
def test_a_reason_that_cannot_be_recorded_is_refused_and_records_nothing(
    memory_ledger: Ledger, reason: str
) -> None:
    job_id = queued(memory_ledger)
    with pytest.raises(InvalidEventError):
        cancel(memory_ledger, job_id, BY_AGENT, reason)
    assert get_job(memory_ledger, job_id).status is Status.QUEUED  # type: ignore[union-attr]


def test_a_credential_in_the_reason_is_scrubbed(memory_ledger: Ledger) -> None:
    job_id = queued(memory_ledger)
    view = cancel(memory_ledger, job_id, BY_AGENT, "see https://bob:hunter2@example.com/x")
    assert "hunter2" not in (view.declined_reason or "")


def test_the_reconciler_and_the_relay_leave_a_cancelled_job_alone(memory_ledger: Ledger) -> None:
    # Two jobs never dispatched (unconfirmed); one is cancelled, its twin shows what would be done.
    job_id, twin = queued(memory_ledger, RECONCILE_READS), queued(memory_ledger, RECONCILE_READS)
    cancel(memory_ledger, job_id, BY_AGENT)
    recorder = Recorder()
    sent = Outbox(memory_ledger, recorder).relay_once(relay_after_s=0)
    assert (sent.confirmed, recorder.sent) == ([twin], [twin])
    found = reconcile_once(memory_ledger, None, POLICY, at=later(DEFAULT_START_WITHIN_S + 60))
    assert found.recorded == [f"job.outcome_missing {twin}"]  # no never_started for the cancel
    assert len(memory_ledger.store.read_stream(job_stream(job_id))) == 2

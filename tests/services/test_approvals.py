"""People in the loop (docs/approvals.md) through the use cases, on SQLite and Postgres (the
store's append function included): a parked call waits undispatched, an approval dispatches it
once, a denial and an expiry end it refused with nothing run, a call that would be refused is
refused and never parked, the submitting token and a second decision are refused, and a call
approved after a brake pull is halted at its claim."""

from __future__ import annotations

import threading

import pytest

from ledger.codes import Code, NextAction, Status
from ledger.decisions import Caller, JobRequest
from ledger.errors import InvalidEventError, NotDecidableError, SelfApprovalError
from ledger.events import JobApprovalDecided, job_stream
from ledger.job_view import JobView, envelope
from ledger.runtime.ledger import Ledger
from ledger.services import brakes
from ledger.services.approvals import Approver, decide, pending
from ledger.services.cancel import Canceller, cancel
from ledger.services.execute import Executor
from ledger.services.reconcile import reconcile_once
from ledger.services.submit import submit
from tests.factories import Recorder
from tests.services.test_reconcile import POLICY, later
from tests.tools import APPROVED_CHARGE, APPROVED_METERED, LARGE_CHARGE

AGENT = Caller(account="acme", token_id="tok-agent")
APPROVER = Approver("acme", "approver", "tok-approver")


def park(
    ledger: Ledger, tool: str = APPROVED_CHARGE, amount: int = 5, sender: Recorder | None = None
) -> JobView:
    return submit(ledger, AGENT, JobRequest(tool, {"amount": amount}), sender).view


def types(ledger: Ledger, job_id: str) -> list[str]:
    return [e.type for e in ledger.store.read_stream(job_stream(job_id))]


def test_a_parked_call_waits_undispatched_then_runs_once_approved(ledger: Ledger) -> None:
    sent = Recorder()
    view = park(ledger, sender=sent)
    shown = envelope(view)
    assert (shown.status, shown.terminal, shown.next_action) == (
        Status.AWAITING_APPROVAL,
        False,
        NextAction.WAIT,
    )
    assert shown.approval is not None
    assert shown.approval.reason == "this tool needs a person's approval for every call"
    assert shown.approval.decided_by is None
    assert sent.sent == []  # parked: not dispatched
    assert [v.job_id for v in pending(ledger, "acme")] == [view.job_id]
    assert pending(ledger, "other") == []

    approved = decide(ledger, view.job_id, APPROVER, "approved", "looks right", sent)
    assert approved.status is Status.QUEUED
    assert approved.approval is not None
    decided = (approved.approval.decision, approved.approval.decided_by)
    assert decided == ("approved", "tok-approver")
    assert approved.approval.decision_reason == "looks right"
    assert sent.sent == [view.job_id]  # dispatched once approved
    assert pending(ledger, "acme") == []

    done = Executor(ledger, "w-1").execute(view.job_id)
    assert done.status is Status.SUCCEEDED
    assert types(ledger, view.job_id) == [
        "job.accepted",
        "job.approval_decided",
        "work.started",
        "work.succeeded",
    ]
    decided = ledger.store.read_stream(job_stream(view.job_id))[1]
    assert decided.actor == "tok-approver"
    payload = decided.payload
    assert isinstance(payload, JobApprovalDecided) and payload.reason == "looks right"


def test_a_denied_call_ends_refused_and_never_runs(ledger: Ledger) -> None:
    view = park(ledger)
    denied = decide(ledger, view.job_id, APPROVER, "denied", "wrong customer")
    assert denied.status is Status.REFUSED and denied.terminal
    assert denied.error is not None
    assert (denied.error.code, denied.error.cause) == (Code.ACCESS_DENIED, "approval_denied")
    assert "wrong customer" in denied.error.message and denied.error.fix
    assert denied.recorded_by == "api"
    assert denied.next_action is NextAction.SATISFY_PRECONDITION
    assert types(ledger, view.job_id) == ["job.accepted", "job.approval_decided", "work.halted"]
    # Deciding twice: the first decision stands, and the refusal carries it.
    with pytest.raises(NotDecidableError) as again:
        decide(ledger, view.job_id, APPROVER, "approved", "changed my mind")
    assert again.value.cause == "denied"
    assert again.value.envelope["approval"]["decision"] == "denied"


def test_an_undecided_call_expires_refused(ledger: Ledger) -> None:
    view = park(ledger)
    assert reconcile_once(ledger, None, POLICY).recorded == []  # not yet
    passed = reconcile_once(ledger, None, POLICY, at=later(3700))
    assert passed.recorded == [f"work.halted {view.job_id}"]
    expired = ledger.store.read_stream(job_stream(view.job_id))
    assert [e.type for e in expired] == ["job.accepted", "work.halted"]
    with ledger.store.reading() as reads:
        found = reads.job(view.job_id)
    assert found is not None and found.status is Status.REFUSED
    assert found.error is not None
    assert (found.error.code, found.error.cause) == (Code.DEADLINE_EXCEEDED, "approval_expired")
    assert found.recorded_by == "reconciler"
    assert found.approval is not None and found.approval.decision == "expired"
    with pytest.raises(NotDecidableError):
        decide(ledger, view.job_id, APPROVER, "approved", "too late")


def test_the_expiry_is_capped_by_the_calls_start_deadline(ledger: Ledger) -> None:
    request = JobRequest(APPROVED_CHARGE, {"amount": 1}, start_within_s=60)
    view = submit(ledger, AGENT, request).view
    assert view.approval is not None
    waited = (view.approval.expires_at - view.approval.requested_at).total_seconds()
    assert 55 <= waited <= 61


def test_a_call_that_would_be_refused_is_refused_never_parked(ledger: Ledger) -> None:
    first = park(ledger, APPROVED_METERED)
    assert first.status is Status.AWAITING_APPROVAL  # parked, and counted in the quota
    second = park(ledger, APPROVED_METERED)
    assert second.status is Status.REFUSED and second.approval is None
    assert second.error is not None and second.error.code is Code.QUOTA_EXCEEDED
    missing = submit(ledger, AGENT, JobRequest(APPROVED_CHARGE, {"amount": "x"})).view
    assert missing.status is Status.REFUSED and missing.approval is None
    brakes.pull(ledger, f"tool:{APPROVED_CHARGE}", "incident", "olga")
    braked = park(ledger)
    assert braked.status is Status.REFUSED and braked.error is not None
    assert braked.error.code is Code.BRAKE_ENGAGED
    assert [v.job_id for v in pending(ledger, "acme")] == [first.job_id]


def test_a_conditional_rule_parks_only_the_calls_it_names(ledger: Ledger) -> None:
    small = park(ledger, LARGE_CHARGE, amount=5)
    large = park(ledger, LARGE_CHARGE, amount=500)
    assert small.status is Status.QUEUED and small.approval is None
    assert large.status is Status.AWAITING_APPROVAL and large.approval is not None
    assert large.approval.reason == "a charge of 500 is over 100"


def test_who_may_decide(ledger: Ledger) -> None:
    view = park(ledger)
    with pytest.raises(SelfApprovalError):
        decide(ledger, view.job_id, Approver("acme", "operator", "tok-agent"), "approved", "me")
    with pytest.raises(InvalidEventError):
        decide(ledger, view.job_id, APPROVER, "approved", "  ")
    assert ledger.store.read_stream(job_stream(view.job_id))[-1].type == "job.accepted"


def test_an_agent_may_cancel_its_parked_call(ledger: Ledger) -> None:
    view = park(ledger)
    cancelled = cancel(ledger, view.job_id, Canceller("acme", "agent", "tok-agent"), "not needed")
    assert cancelled.status is Status.DECLINED
    with pytest.raises(NotDecidableError) as late:
        decide(ledger, view.job_id, APPROVER, "approved", "ok")
    assert late.value.cause == "cancelled"


def test_approved_after_a_brake_pull_is_halted_at_its_claim(ledger: Ledger) -> None:
    view = park(ledger)
    brake = brakes.pull(ledger, f"tool:{APPROVED_CHARGE}", "incident", "olga")
    approved = decide(ledger, view.job_id, APPROVER, "approved", "fine")
    assert approved.status is Status.QUEUED
    done = Executor(ledger, "w-1").execute(view.job_id)
    assert (done.status, done.code) == (Status.REFUSED, Code.BRAKE_ENGAGED)
    with ledger.store.reading() as reads:
        halted = reads.job(view.job_id)
    assert halted is not None and halted.error is not None
    assert (halted.error.code, halted.error.cause) == (Code.BRAKE_ENGAGED, brake.brake_id)
    assert halted.recorded_by == "worker"
    assert "work.started" not in types(ledger, view.job_id)


def test_racing_decisions_leave_exactly_one(ledger: Ledger) -> None:
    """Approvers and the expiry racing on one parked call: exactly one is recorded, every other
    one is refused (NOT_DECIDABLE) or finds the call ended, and the stream tells one story."""
    for _ in range(5):
        view = park(ledger)
        won, lost = race(ledger, view.job_id, ["a1", "a2", "d1", "d2", "expire"])
        assert len(won) == 1, (won, lost)
        stream = types(ledger, view.job_id)
        assert stream[0] == "job.accepted" and stream.count("job.approval_decided") <= 1


def race(ledger: Ledger, job_id: str, kinds: list[str]) -> tuple[list[str], list[str]]:
    start = threading.Barrier(len(kinds))
    won: list[str] = []
    lost: list[str] = []

    def attempt(kind: str) -> None:
        start.wait()
        if kind == "expire":
            # An approved call, queued now, would be closed as never started at that time:
            # only the expiry (work.halted) is this race's.
            passed = reconcile_once(ledger, None, POLICY, at=later(4000))
            (won if f"work.halted {job_id}" in passed.recorded else lost).append(kind)
            return
        who = Approver("acme", "approver", f"tok-{kind}")
        try:
            decide(ledger, job_id, who, "approved" if kind.startswith("a") else "denied", kind)
        except NotDecidableError:
            lost.append(kind)
        else:
            won.append(kind)

    threads = [threading.Thread(target=attempt, args=(k,)) for k in kinds]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert sorted(won + lost) == sorted(kinds)
    return won, lost

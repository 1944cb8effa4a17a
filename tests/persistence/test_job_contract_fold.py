"""The job contract, the fold: every job event type through batched appends. The read model a
store writes (on Postgres, server-side, from the view folded in Python) equals the Python fold
of the stream's events and what a rebuild writes. Runs on every store."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

from ledger.approvals import denied_outcome, expired_outcome
from ledger.codes import Code, OutcomeMissingCause
from ledger.error_info import ErrorInfo
from ledger.events import (
    JOB_EVENT_TYPES,
    ApprovalAsk,
    Cancellation,
    JobAccepted,
    JobApprovalDecided,
    JobOutcomeMissing,
    JobRedispatched,
    JobRefused,
    NewEvent,
    Payload,
    WorkDeclined,
    WorkFailed,
    WorkHalted,
    WorkLateOutcome,
    WorkPartial,
    WorkRetryScheduled,
    WorkStarted,
    WorkSucceeded,
    job_stream,
)
from ledger.job_fold import evolve
from ledger.job_view import JobView
from ledger.persistence.appends import AppendStatus, JobAppend
from ledger.persistence.base import Store
from ledger.queries import JobFilter
from tests.factories import accepted, rebuild

ERROR = ErrorInfo(code=Code.SOURCE_UNRELIABLE, dependency="d", message="m", retryable=True)
LATER = datetime.now(UTC) + timedelta(hours=1)
CANCELLED = Cancellation(account="acme", role="agent", reason="enough")


def _started(attempt: int) -> WorkStarted:
    return WorkStarted(attempt=attempt, worker="w-1", lease_expires_at=LATER)


# Each lifecycle: the payloads after the decision, one append each (None: the job is refused).
LIFECYCLES: dict[str, list[Payload] | None] = {
    "refused": None,
    "succeeded": [_started(1), WorkSucceeded(attempt=1, result={"n": 1})],
    "declined": [_started(1), WorkDeclined(attempt=1, reason="already so")],
    "partial": [_started(1), WorkPartial(attempt=1, processed=2, skipped=["x"], total=3)],
    "halted": [WorkHalted(attempt=1, error=ERROR.model_copy(update={"code": Code.BRAKE_ENGAGED}))],
    "retried": [
        _started(1),
        WorkRetryScheduled(attempt=1, error=ERROR, fingerprint="f1", due_at=LATER),
        _started(2),
        WorkFailed(attempt=2, error=ERROR, detail="boom", fingerprint="f2"),
        WorkLateOutcome(attempt=1, outcome_type="work.succeeded", outcome={"result": {}}),
    ],
    # A caller's cancel before any worker started it (docs/cancel.md), queued and retry-waiting.
    "cancelled": [WorkDeclined(attempt=0, reason="Cancelled.", cancelled=CANCELLED)],
    "cancelled_retry": [
        _started(1),
        WorkRetryScheduled(attempt=1, error=ERROR, fingerprint="f1", due_at=LATER),
        WorkDeclined(attempt=1, reason="Cancelled: enough.", cancelled=CANCELLED),
    ],
    # Parked for a person's approval (docs/approvals.md): approved then run, denied, expired.
    "approved": [
        JobApprovalDecided(
            decision="approved", reason="ok", token_id="t-a", account="acme", role="approver"
        ),
        _started(1),
        WorkSucceeded(attempt=1, result={}),
    ],
    "denied": [
        JobApprovalDecided(
            decision="denied", reason="no", token_id="t-a", account="acme", role="approver"
        ),
        denied_outcome("no"),
    ],
    "expired": [expired_outcome()],
    "silent": [
        JobRedispatched(dispatch=2, reason="not started"),
        JobOutcomeMissing(
            attempt=0,
            cause=OutcomeMissingCause.NEVER_STARTED,
            error=ERROR.model_copy(update={"code": Code.OUTCOME_MISSING}),
        ),
    ],
}


PARKED = ("approved", "denied", "expired")


def test_every_event_type_folds_the_same_live_in_python_and_rebuilt(any_store: Store) -> None:
    live: dict[str, JobView] = {}
    seen: set[str] = set()
    for name, steps in LIFECYCLES.items():
        job_id = str(uuid.uuid4())
        if steps is None:
            decision = NewEvent(
                payload=JobRefused(account="acme", tool=name, error=ERROR), actor="api"
            )
        elif name in PARKED:
            ask = ApprovalAsk(reason="a person looks first", expires_at=LATER)
            payload = JobAccepted(account="acme", tool=f"t.{name}", args={}, approval=ask)
            decision = NewEvent(payload=payload, actor="tok-agent")
        else:
            decision = accepted(tool=f"t.{name}")
        view = _append(any_store, JobAppend(job_id, [decision], None))
        for payload in steps or []:
            view = _append(
                any_store, JobAppend(job_id, [NewEvent(payload=payload, actor="w")], view)
            )
        live[job_id] = view
        seen.update(e.type for e in any_store.read_stream(job_stream(job_id)))
    assert seen == JOB_EVENT_TYPES  # every job event type went through the batch path

    with any_store.reading() as reads:
        stored = {v.job_id: v for v in reads.jobs(JobFilter(limit=100))}
    assert stored == live
    for job_id, view in live.items():
        folded = None
        for event in any_store.read_stream(job_stream(job_id)):
            folded = evolve(folded, event)
        assert folded == view, job_id
    rebuild(any_store)
    with any_store.reading() as reads:
        assert {v.job_id: v for v in reads.jobs(JobFilter(limit=100))} == live


def _append(store: Store, item: JobAppend) -> JobView:
    (done,) = store.append_jobs([item])
    assert done.status is AppendStatus.OK, done.status
    return done.job

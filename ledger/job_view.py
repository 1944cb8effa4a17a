"""The job read model, folded from a job stream's events, and the envelope agents read.

`evolve` is pure: the live projection and the rebuild both call it, so they cannot disagree.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from ledger.budget import BudgetNote
from ledger.codes import ApprovalCause, Code, NextAction, OutcomeMissingCause, Status, next_action
from ledger.error_info import ErrorInfo
from ledger.errors import JobStreamError
from ledger.events import (
    Cancellation,
    JobAccepted,
    JobApprovalDecided,
    JobOutcomeMissing,
    JobRedispatched,
    JobRefused,
    Payload,
    RecordedEvent,
    WorkDeclined,
    WorkFailed,
    WorkHalted,
    WorkLateOutcome,
    WorkPartial,
    WorkRetryScheduled,
    WorkStarted,
    WorkSucceeded,
    job_id_of,
)
from ledger.public import public_outcome
from ledger.tracing import TraceRecord


class PartialInfo(BaseModel):
    model_config = ConfigDict(frozen=True)

    processed: int
    skipped: list[str]
    total: int | None


class Approval(BaseModel):
    """A parked call's approval (docs/approvals.md), as the envelope shows it: why it waits
    for a person, until when, and (once decided) who decided what, when and why."""

    model_config = ConfigDict(frozen=True)

    reason: str
    requested_at: datetime
    expires_at: datetime
    decision: Literal["approved", "denied", "expired"] | None = None
    decided_by: str | None = None  # the deciding token's id; `reconciler` for an expiry
    decided_at: datetime | None = None
    decision_reason: str | None = None


class JobView(BaseModel):
    """Everything the ledger knows about one job, as of `ledger_position`."""

    model_config = ConfigDict(frozen=True)

    job_id: str
    account: str
    tool: str
    status: Status
    accepted: bool
    spends: bool
    attempts: int = 0
    max_attempts: int = 1
    timeout_s: float = 300.0
    idempotency_key: str | None = None
    request_hash: str | None = None
    args: dict[str, Any] = Field(default_factory=dict)  # for the worker; not in the envelope
    result: dict[str, Any] | None = None
    declined_reason: str | None = None
    partial: PartialInfo | None = None
    error: ErrorInfo | None = None
    recorded_by: str
    ledger_position: int
    stream_version: int = 1  # writers that act on this view append after this version
    head_hash: str | None = None  # the hash at stream_version: the next event's prev_hash
    created_at: datetime
    updated_at: datetime
    lease_expires_at: datetime | None = None
    due_at: datetime | None = None  # when a scheduled retry is due
    dispatches: int = 1
    # The caller's start deadline (capped by the tool's), and when the current wait ends:
    # None before deadlines were recorded (ledger.queueing gives those a default).
    start_within_s: float | None = None
    start_by: datetime | None = None
    last_fingerprint: str | None = None
    late_outcomes: list[dict[str, Any]] = Field(default_factory=list)
    # Added later; left out of the stored view while unset (older rows read the same).
    secret_paths: list[str] | None = Field(None, exclude_if=lambda v: v is None)
    budget_bytes: int | None = Field(None, exclude_if=lambda v: v is None)  # the agent's ask
    budget: BudgetNote | None = Field(None, exclude_if=lambda v: v is None)  # answer was cut
    # Cancelled by its caller before it started (docs/cancel.md): who, and why.
    cancelled: Cancellation | None = Field(None, exclude_if=lambda v: v is None)
    trace: TraceRecord | None = Field(None, exclude_if=lambda v: v is None)  # the decision's
    # Parked for a person's approval (docs/approvals.md), and the agent's turn (docs/turns.md).
    approval: Approval | None = Field(None, exclude_if=lambda v: v is None)
    turn: str | None = Field(None, exclude_if=lambda v: v is None)
    turn_halt: bool | None = Field(None, exclude_if=lambda v: v is None)
    # The submitting token's id, kept for a parked job: it may not approve its own call.
    submitted_by: str | None = Field(None, exclude_if=lambda v: v is None)

    @property
    def terminal(self) -> bool:
        return self.status.terminal

    @property
    def code(self) -> Code | None:
        return self.error.code if self.error else None

    @property
    def next_action(self) -> NextAction:
        if self.budget is not None and self.status in (Status.SUCCEEDED, Status.DECLINED):
            return NextAction.USE_PARTIAL_AND_NARROW  # the work is done; the answer was cut
        return next_action(self.status, self.code, self.spends)


class Waiting(BaseModel):
    """The envelope's account of a wait (`waiting`; null unless queued or retrying)."""

    model_config = ConfigDict(frozen=True)

    since: datetime  # accepted, or the retry was due
    seconds: float  # waited so far
    start_by: datetime  # closed as never started if no worker has started it by then
    dispatch: Literal["confirmed", "unconfirmed"]  # has the broker confirmed its message
    dispatches: int  # messages sent for it (more than one: sent again on evidence of a loss)


class JobEnvelope(BaseModel):
    """`GET /v1/jobs/{job_id}` (contract §3): what the agent needs about its job, no more. Not
    the global `ledger_position` (it tells the volume of the whole ledger), not the workers,
    and of late outcomes only their public fields."""

    job_id: str
    account: str
    tool: str
    status: Status
    terminal: bool
    attempts: int
    next_action: NextAction
    result: dict[str, Any] | None
    declined_reason: str | None
    partial: PartialInfo | None
    error: ErrorInfo | None
    recorded_by: str
    created_at: datetime
    updated_at: datetime
    late_outcomes: list[dict[str, Any]]
    waiting: Waiting | None = None
    budget: BudgetNote | None = Field(
        description="Null when the answer came back whole; else how it was cut to fit"
    )
    approval: Approval | None = Field(
        None,
        description="Null unless the tool asked a person to approve this call "
        "(docs/approvals.md): why, until when, and the decision once made",
    )


def envelope(view: JobView, waiting: Waiting | None = None) -> JobEnvelope:
    return JobEnvelope(
        job_id=view.job_id,
        account=view.account,
        tool=view.tool,
        status=view.status,
        terminal=view.terminal,
        attempts=view.attempts,
        next_action=view.next_action,
        result=view.result,
        declined_reason=view.declined_reason,
        partial=view.partial,
        error=view.error,
        recorded_by=view.recorded_by,
        created_at=view.created_at,
        updated_at=view.updated_at,
        late_outcomes=[public_outcome(late) for late in view.late_outcomes],
        waiting=waiting,
        budget=view.budget,
        approval=view.approval,
    )


def evolve(view: JobView | None, event: RecordedEvent) -> JobView:
    payload = event.payload
    if view is None:
        return _first(event, payload)
    stamp: dict[str, Any] = {
        "ledger_position": event.stored_position,
        "stream_version": event.stream_version,
        "head_hash": event.hash,
        "updated_at": event.recorded_at,
    }
    if isinstance(payload, JobApprovalDecided):
        if view.terminal:
            raise JobStreamError(f"job {view.job_id}: {payload.type} after a terminal event")
        return view.model_copy(update=stamp | _decided(view, payload, event.recorded_at))
    update = stamp | _change(view, payload)
    if isinstance(payload, WorkHalted) and view.approval is not None:
        update |= _approval_closed(view, event, payload)
    return view.model_copy(update=update)


def status_after(view: JobView, payload: Payload) -> Status | None:
    """The status `payload` leaves the job in, by the fold itself (no table beside it to drift
    from it). A closed job keeps its status whatever follows (the fold takes only late
    outcomes then): a halt seen on the claim's own, halted, view is its status. None for an
    event that changes no status or that the fold refuses on this view."""
    if view.terminal:
        return view.status
    try:
        return _change(view, payload).get("status")
    except JobStreamError:
        return None


def _approval_closed(view: JobView, event: RecordedEvent, payload: WorkHalted) -> dict[str, Any]:
    """A parked call's outcome without running: denied (the decision event came just before)
    or expired (the reconciler's, with no decision event). Recorded by who ended it."""
    cause = payload.error.cause
    if cause == ApprovalCause.EXPIRED.value:
        assert view.approval is not None
        expired = view.approval.model_copy(
            update={
                "decision": "expired",
                "decided_by": event.actor,
                "decided_at": event.recorded_at,
                "decision_reason": "nobody decided before it expired",
            }
        )
        return {"approval": expired, "recorded_by": "reconciler"}
    if cause == ApprovalCause.DENIED.value:
        return {"recorded_by": "api"}
    return {}


def _first(event: RecordedEvent, payload: Payload) -> JobView:
    common: dict[str, Any] = {
        "job_id": job_id_of(event.stream_id),
        "recorded_by": "api",
        "ledger_position": event.stored_position,
        "head_hash": event.hash,
        "created_at": event.recorded_at,
        "updated_at": event.recorded_at,
    }
    if isinstance(payload, JobAccepted):
        approval = None
        start_by = _after(event.recorded_at, payload.start_within_s)
        if payload.approval is not None:
            approval = Approval(
                reason=payload.approval.reason,
                requested_at=event.recorded_at,
                expires_at=payload.approval.expires_at,
            )
            start_by = payload.approval.expires_at  # what the reconciler closes it by, parked
        return JobView(
            **common,
            account=payload.account,
            tool=payload.tool,
            status=Status.AWAITING_APPROVAL if approval is not None else Status.QUEUED,
            approval=approval,
            submitted_by=event.actor if approval is not None else None,
            turn=payload.turn,
            turn_halt=payload.turn_halt,
            accepted=True,
            spends=payload.spends,
            max_attempts=payload.max_attempts,
            timeout_s=payload.timeout_s,
            idempotency_key=payload.idempotency_key,
            request_hash=payload.request_hash,
            args=payload.args,
            start_within_s=payload.start_within_s,
            start_by=start_by,
            secret_paths=payload.secret_paths,
            budget_bytes=payload.budget_bytes,
            trace=payload.trace,
        )
    if isinstance(payload, JobRefused):
        return JobView(
            **common,
            account=payload.account,
            tool=payload.tool,
            status=Status.REFUSED,
            accepted=False,
            spends=payload.spends,
            idempotency_key=payload.idempotency_key,
            request_hash=payload.request_hash,
            error=payload.error,
            secret_paths=payload.secret_paths,
            trace=payload.trace,
            turn=payload.turn,
        )
    raise JobStreamError(f"{event.stream_id} starts with {event.type}, not a decision")


def _change(view: JobView, payload: Payload) -> dict[str, Any]:
    worker = {"recorded_by": "worker"}
    if isinstance(payload, WorkLateOutcome):
        late = {"attempt": payload.attempt, "type": payload.outcome_type} | payload.outcome
        return {"late_outcomes": [*view.late_outcomes, late]}
    if view.terminal:
        raise JobStreamError(f"job {view.job_id}: {payload.type} after a terminal event")
    if isinstance(payload, WorkStarted):
        return worker | {
            "status": Status.RUNNING,
            "attempts": payload.attempt,
            "lease_expires_at": payload.lease_expires_at,
            "due_at": None,
            "start_by": None,
        }
    if isinstance(payload, WorkSucceeded):
        return worker | {
            "status": Status.SUCCEEDED,
            "result": payload.result,
            "budget": payload.budget,
        }
    if isinstance(payload, WorkDeclined) and payload.cancelled is not None:
        # The caller's cancel, before any worker started it: nothing ran, nothing waits.
        return {
            "status": Status.DECLINED,
            "result": payload.result,
            "declined_reason": payload.reason,
            "cancelled": payload.cancelled,
            "recorded_by": "api",
            "due_at": None,
            "start_by": None,
        }
    if isinstance(payload, WorkDeclined):
        return worker | {
            "status": Status.DECLINED,
            "result": payload.result,
            "declined_reason": payload.reason,
            "budget": payload.budget,
        }
    if isinstance(payload, WorkPartial):
        partial = PartialInfo(
            processed=payload.processed, skipped=payload.skipped, total=payload.total
        )
        return worker | {
            "status": Status.PARTIAL,
            "result": payload.result,
            "partial": partial,
            "budget": payload.budget,
        }
    if isinstance(payload, WorkFailed):
        return worker | {"status": Status.FAILED, "error": payload.error}
    if isinstance(payload, WorkHalted):
        return worker | {"status": Status.REFUSED, "error": payload.error}
    if isinstance(payload, WorkRetryScheduled):
        return worker | {
            "status": Status.RETRYING,
            "due_at": payload.due_at,
            "start_by": _after(payload.due_at, view.start_within_s),
            "last_fingerprint": payload.fingerprint,
            "lease_expires_at": None,
        }
    if isinstance(payload, JobRedispatched):
        return {
            "status": Status.QUEUED,
            "dispatches": payload.dispatch,
            "recorded_by": "reconciler",
        }
    if isinstance(payload, JobOutcomeMissing):
        by_worker = payload.cause is OutcomeMissingCause.NO_OUTCOME_RETURNED
        return {
            "status": Status.FAILED,
            "error": payload.error,
            "recorded_by": "worker" if by_worker else "reconciler",
        }
    raise JobStreamError(f"job {view.job_id}: unexpected {payload.type}")


def _decided(view: JobView, payload: JobApprovalDecided, at: datetime) -> dict[str, Any]:
    if view.approval is None or view.approval.decision is not None:
        raise JobStreamError(f"job {view.job_id}: {payload.type} on a job not awaiting approval")
    decided = view.approval.model_copy(
        update={
            "decision": payload.decision,
            "decided_by": payload.token_id,
            "decided_at": at,
            "decision_reason": payload.reason,
        }
    )
    if payload.decision == "denied":
        return {"approval": decided}  # its outcome (work.halted) follows in the same append
    # Approved: it waits for a worker now, by the call's own start deadline.
    return {
        "approval": decided,
        "status": Status.QUEUED,
        "recorded_by": "api",
        "start_by": _after(view.created_at, view.start_within_s),
    }


def _after(moment: datetime, seconds: float | None) -> datetime | None:
    return None if seconds is None else moment + timedelta(seconds=seconds)

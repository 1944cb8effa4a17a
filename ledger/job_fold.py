"""The job read model's fold: how each event of a job stream changes a `JobView`.

`evolve` is pure: the live projection, the rebuild and the SQL append function's caller all
fold with it, so they cannot disagree; `status_after` answers from it too (what status an
event leaves a job in), so nothing keeps a second copy of that rule.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from ledger.codes import ApprovalCause, OutcomeMissingCause, Status
from ledger.errors import JobStreamError
from ledger.events import (
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
from ledger.job_view import Approval, JobView, PartialInfo


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

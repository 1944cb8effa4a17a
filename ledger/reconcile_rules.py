"""The reconciler's rules (pure: open jobs and a clock in, findings out; contract §2 to §4).

Silence must not look like success or like "still running" forever:
- accepted (or due for retry) but never started past the dispatch deadline → re-dispatch,
  which is safe because nothing ran, a bounded number of times; then OUTCOME_MISSING
  (`never_started`);
- started, no outcome, lease expired → OUTCOME_MISSING (`worker_lost`), or, for a tool that
  does not spend and has attempts left, the next attempt. A spending tool is never re-run.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from ledger.codes import Code, OutcomeMissingCause, Status
from ledger.error_info import ErrorInfo
from ledger.events import JobOutcomeMissing, JobRedispatched, Payload, WorkRetryScheduled
from ledger.job_view import JobView


@dataclass(frozen=True)
class ReconcilePolicy:
    dispatch_timeout_s: float = 30.0
    max_dispatches: int = 3  # the first dispatch included


@dataclass(frozen=True)
class OpenJob:
    view: JobView
    lease_expires_at: datetime | None  # the renewed lease; None if the job holds none


@dataclass(frozen=True)
class Finding:
    job_id: str
    after_version: int  # append after this version: a second reconciler's copy conflicts
    payload: Payload
    dispatch: bool  # hand the job id to the broker once the finding is recorded


def dispatch_cutoff(now: datetime, policy: ReconcilePolicy) -> datetime:
    """Jobs waiting to start since before this are overdue."""
    return now - timedelta(seconds=policy.dispatch_timeout_s)


def findings(jobs: list[OpenJob], now: datetime, policy: ReconcilePolicy) -> list[Finding]:
    found = []
    for job in jobs:
        finding = _judge(job, now, policy)
        if finding is not None:
            found.append(finding)
    return found


def _judge(job: OpenJob, now: datetime, policy: ReconcilePolicy) -> Finding | None:
    view = job.view
    cutoff = dispatch_cutoff(now, policy)
    if view.status is Status.QUEUED and view.updated_at < cutoff:
        return _overdue(view, policy)
    if view.status is Status.RETRYING and view.due_at is not None and view.due_at < cutoff:
        return _overdue(view, policy)
    if view.status is Status.RUNNING:
        lease = job.lease_expires_at or view.lease_expires_at
        if lease is not None and lease < now:
            return _lost(view, now)
    return None


def _overdue(view: JobView, policy: ReconcilePolicy) -> Finding:
    if view.dispatches < policy.max_dispatches:
        again = view.dispatches + 1
        reason = f"not started within the dispatch deadline; dispatch {again}"
        payload: Payload = JobRedispatched(dispatch=again, reason=reason)
        return Finding(view.job_id, view.stream_version, payload, dispatch=True)
    missing = JobOutcomeMissing(
        attempt=view.attempts,
        cause=OutcomeMissingCause.NEVER_STARTED,
        error=_missing_error(OutcomeMissingCause.NEVER_STARTED, view),
        detail=f"dispatched {view.dispatches} times, never started",
    )
    return Finding(view.job_id, view.stream_version, missing, dispatch=False)


def _lost(view: JobView, now: datetime) -> Finding:
    error = _missing_error(OutcomeMissingCause.WORKER_LOST, view)
    if not view.spends and view.attempts < view.max_attempts:
        retry = WorkRetryScheduled(
            attempt=view.attempts,
            error=error,
            detail="the worker stopped renewing its lease",
            due_at=now,
        )
        return Finding(view.job_id, view.stream_version, retry, dispatch=True)
    missing = JobOutcomeMissing(
        attempt=view.attempts,
        cause=OutcomeMissingCause.WORKER_LOST,
        error=error,
        detail="the worker stopped renewing its lease before recording an outcome",
    )
    return Finding(view.job_id, view.stream_version, missing, dispatch=False)


def _missing_error(cause: OutcomeMissingCause, view: JobView) -> ErrorInfo:
    if cause is OutcomeMissingCause.NEVER_STARTED:
        message = "The job was accepted but never started; nothing ran."
        fix = "check that workers are running and consuming the queue, then submit again"
    elif view.spends:
        message = "The worker was lost while the tool ran; the work may have happened."
        fix = "check at the source whether the work happened before doing it again"
    else:
        message = "The worker was lost while the tool ran and no outcome was recorded."
        fix = "submit the job again"
    return ErrorInfo(
        code=Code.OUTCOME_MISSING,
        dependency="worker",
        operation="run the tool and record its outcome",
        retryable=False,
        fix=fix,
        message=message,
        cause=cause.value,
    )

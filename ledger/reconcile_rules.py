"""The reconciler's rules (pure: open jobs and a clock in, findings out; contract §2 to §4).

Silence must not look like success or like "still running" forever, and late must not be
told as lost:
- waiting (accepted, or due for a retry) and not started by its start deadline (the caller's
  `start_within_s`, capped by the tool's) → OUTCOME_MISSING (`never_started`). Nothing else
  closes a waiting job: a message the broker confirmed stays queued until a worker takes it;
- waiting, with evidence that its confirmed message is gone (the queue lost its marker for the
  epoch the message was confirmed under, or a worker took the delivery and could not claim
  it) → re-dispatch, recorded with that evidence; safe, because nothing ran. A message that
  was never confirmed is the outbox's to publish, not a finding;
- parked for a person's approval and not decided by its `expires_at` → refused
  (DEADLINE_EXCEEDED, `approval_expired`; docs/approvals.md): nothing ran;
- started, no outcome, lease expired → OUTCOME_MISSING (`worker_lost`), or, for a tool that
  does not spend and has attempts left, the next attempt. A spending tool is never re-run.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from ledger.approvals import expired_outcome
from ledger.codes import Code, OutcomeMissingCause, Status
from ledger.error_info import ErrorInfo
from ledger.events import JobOutcomeMissing, JobRedispatched, Payload, WorkRetryScheduled
from ledger.job_view import JobView
from ledger.queueing import (
    DEFAULT_START_WITHIN_S,
    WAITING,
    DispatchState,
    Evidence,
    start_deadline,
    waiting_since,
)

RELAY_AFTER_S = 5.0


@dataclass(frozen=True)
class ReconcilePolicy:
    # An unconfirmed message older than this is published again by the reconciler's relay
    # (OUTCOMES_DISPATCH_TIMEOUT_S): its deciding process had that long to publish it.
    relay_after_s: float = RELAY_AFTER_S
    # The start deadline of jobs decided before deadlines were recorded.
    default_start_within_s: float = DEFAULT_START_WITHIN_S
    # A worker that rejected a job's message is sent another after this, doubling each time.
    rejected_backoff_s: float = 2.0
    rejected_backoff_max_s: float = 60.0
    # Settled webhook deliveries (and their attempts) older than this are pruned, a batch a
    # pass (OUTCOMES_WEBHOOK_KEEP_DAYS).
    webhook_keep_s: float = 7 * 86400.0


@dataclass(frozen=True)
class OpenJob:
    view: JobView
    lease_expires_at: datetime | None  # the renewed lease; None if the job holds none
    dispatch: DispatchState | None = None  # what the outbox recorded of its message


@dataclass(frozen=True)
class Finding:
    # The view it was judged on: the finding is appended after it, so a second reconciler's
    # copy conflicts.
    view: JobView
    payload: Payload
    dispatch: bool  # hand the job id to the broker once the finding is recorded

    @property
    def job_id(self) -> str:
        return self.view.job_id


def findings(
    jobs: list[OpenJob], now: datetime, policy: ReconcilePolicy, epoch: str | None = None
) -> list[Finding]:
    """What to record for each job; `epoch` is the queue's current epoch (None: unknown)."""
    found = []
    for job in jobs:
        finding = _judge(job, now, policy, epoch)
        if finding is not None:
            found.append(finding)
    return found


def _judge(
    job: OpenJob, now: datetime, policy: ReconcilePolicy, epoch: str | None
) -> Finding | None:
    view = job.view
    if view.status is Status.AWAITING_APPROVAL:
        # Parked: its `start_by` is its approval's `expires_at` (ledger.job_view).
        if view.start_by is not None and view.start_by <= now:
            return Finding(view, expired_outcome(), dispatch=False)
        return None
    if view.status in WAITING:
        deadline = start_deadline(view, policy.default_start_within_s)
        if deadline <= now:
            return _never_started(view, job.dispatch, deadline)
        evidence = _evidence(job, now, policy, epoch)
        if evidence is not None:
            kind, reason = evidence
            again = view.dispatches + 1
            payload = JobRedispatched(dispatch=again, reason=reason, evidence=kind.value)
            return Finding(view, payload, dispatch=True)
        return None
    if view.status is Status.RUNNING:
        lease = job.lease_expires_at or view.lease_expires_at
        if lease is not None and lease < now:
            return _lost(view, now)
    return None


def _evidence(
    job: OpenJob, now: datetime, policy: ReconcilePolicy, epoch: str | None
) -> tuple[Evidence, str] | None:
    """Why the confirmed message of this wait is gone, if anything shows it."""
    dispatch, view = job.dispatch, job.view
    if dispatch is None:
        return None
    if dispatch.rejects(view):
        waited = (now - (dispatch.rejected_at or view.updated_at)).total_seconds()
        backoff = policy.rejected_backoff_s * 2 ** max(0, view.dispatches - 1)
        if waited < min(backoff, policy.rejected_backoff_max_s):
            return None
        return Evidence.WORKER_REJECTED, f"a worker could not take it: {dispatch.rejected}"
    moved = epoch is not None and dispatch.epoch is not None and dispatch.epoch != epoch
    if moved and dispatch.confirms(view):
        return Evidence.QUEUE_LOST, (
            f"the queue lost its marker for epoch {dispatch.epoch} (deleted, re-created or "
            "wiped): the message confirmed then may be gone"
        )
    return None


def _never_started(view: JobView, dispatch: DispatchState | None, deadline: datetime) -> Finding:
    waited = (deadline - waiting_since(view)).total_seconds()
    confirmed = dispatch is not None and dispatch.confirms(view)
    told = "its message was confirmed by the broker" if confirmed else "no dispatch was confirmed"
    missing = JobOutcomeMissing(
        attempt=view.attempts,
        cause=OutcomeMissingCause.NEVER_STARTED,
        error=_missing_error(OutcomeMissingCause.NEVER_STARTED, view),
        detail=f"not started within its start deadline ({waited:g} s); {told}",
    )
    return Finding(view, missing, dispatch=False)


def _lost(view: JobView, now: datetime) -> Finding:
    error = _missing_error(OutcomeMissingCause.WORKER_LOST, view)
    if not view.spends and view.attempts < view.max_attempts:
        retry = WorkRetryScheduled(
            attempt=view.attempts,
            error=error,
            detail="the worker stopped renewing its lease",
            due_at=now,
        )
        return Finding(view, retry, dispatch=True)
    missing = JobOutcomeMissing(
        attempt=view.attempts,
        cause=OutcomeMissingCause.WORKER_LOST,
        error=error,
        detail="the worker stopped renewing its lease before recording an outcome",
    )
    return Finding(view, missing, dispatch=False)


def _missing_error(cause: OutcomeMissingCause, view: JobView) -> ErrorInfo:
    if cause is OutcomeMissingCause.NEVER_STARTED and view.attempts:
        message = "The job's next attempt did not start in time; the last one failed."
        fix = "check that workers are running and consuming the queue, then submit again"
    elif cause is OutcomeMissingCause.NEVER_STARTED:
        message = "The job was not started within its start deadline; nothing ran."
        fix = (
            "check that workers are running and consuming the queue, then submit again "
            "(with a longer start_within_s if the tool allows it)"
        )
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

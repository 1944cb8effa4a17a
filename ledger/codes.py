"""Failure codes, job statuses and the agent's next action (contract §3, seed tables)."""

from __future__ import annotations

from enum import StrEnum


class Code(StrEnum):
    # Tool failures, from the seed article's taxonomy.
    INPUT_MISSING = "INPUT_MISSING"
    REFERENCE_UNRESOLVED = "REFERENCE_UNRESOLVED"
    CAPABILITY_UNAVAILABLE = "CAPABILITY_UNAVAILABLE"
    ACCESS_DENIED = "ACCESS_DENIED"
    SOURCE_UNRELIABLE = "SOURCE_UNRELIABLE"
    # The ledger's own codes.
    INPUT_INVALID = "INPUT_INVALID"
    QUOTA_EXCEEDED = "QUOTA_EXCEEDED"
    BRAKE_ENGAGED = "BRAKE_ENGAGED"
    OUTCOME_MISSING = "OUTCOME_MISSING"
    TOOL_CRASHED = "TOOL_CRASHED"
    DEADLINE_EXCEEDED = "DEADLINE_EXCEEDED"
    # A request's refusal, never a job's outcome: a cancel of a job that already started.
    NOT_CANCELLABLE = "NOT_CANCELLABLE"
    # A request's refusal too: an approval decision on a job not awaiting one (decided before,
    # cancelled, expired, or never parked).
    NOT_DECIDABLE = "NOT_DECIDABLE"


TOOL_FAILURE_CODES = frozenset(
    {
        Code.INPUT_MISSING,
        Code.REFERENCE_UNRESOLVED,
        Code.CAPABILITY_UNAVAILABLE,
        Code.ACCESS_DENIED,
        Code.SOURCE_UNRELIABLE,
    }
)


# Codes that refuse a request about a job and leave the job as it was: no job ends with one.
REQUEST_CODES = frozenset({Code.NOT_CANCELLABLE, Code.NOT_DECIDABLE})


class Status(StrEnum):
    # Parked until a person approves it (docs/approvals.md): open, nothing ran, not dispatched.
    AWAITING_APPROVAL = "awaiting_approval"
    QUEUED = "queued"
    RUNNING = "running"
    RETRYING = "retrying"
    SUCCEEDED = "succeeded"
    DECLINED = "declined"
    PARTIAL = "partial"
    REFUSED = "refused"
    FAILED = "failed"

    @property
    def terminal(self) -> bool:
        return self not in _OPEN


_OPEN = frozenset({Status.AWAITING_APPROVAL, Status.QUEUED, Status.RUNNING, Status.RETRYING})


class NextAction(StrEnum):
    WAIT = "wait"
    ACCEPT = "accept"
    USE_PARTIAL_AND_NARROW = "use_partial_and_narrow"
    SATISFY_PRECONDITION = "satisfy_precondition"
    STOP_AND_REPORT = "stop_and_report"
    VERIFY_AT_SOURCE = "verify_at_source"


class OutcomeMissingCause(StrEnum):
    NEVER_STARTED = "never_started"
    WORKER_LOST = "worker_lost"
    NO_OUTCOME_RETURNED = "no_outcome_returned"


class ApprovalCause(StrEnum):
    """Why a parked call ended refused without running (docs/approvals.md)."""

    DENIED = "approval_denied"  # ACCESS_DENIED: a person said no
    EXPIRED = "approval_expired"  # DEADLINE_EXCEEDED: nobody decided by its expires_at


_BY_STATUS = {
    Status.AWAITING_APPROVAL: NextAction.WAIT,
    Status.QUEUED: NextAction.WAIT,
    Status.RUNNING: NextAction.WAIT,
    Status.RETRYING: NextAction.WAIT,
    Status.SUCCEEDED: NextAction.ACCEPT,
    Status.DECLINED: NextAction.ACCEPT,
    Status.PARTIAL: NextAction.USE_PARTIAL_AND_NARROW,
    Status.REFUSED: NextAction.SATISFY_PRECONDITION,
    Status.FAILED: NextAction.STOP_AND_REPORT,
}


def next_action(status: Status, code: Code | None, spends: bool) -> NextAction:
    """The one place that maps an outcome to what the agent should do next.

    Silence on a tool that spends may hide work that did happen, so the agent is sent to
    the source of truth instead of being told to report a failure.
    """
    if status is Status.FAILED and code is Code.OUTCOME_MISSING and spends:
        return NextAction.VERIFY_AT_SOURCE
    return _BY_STATUS[status]

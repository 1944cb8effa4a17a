"""The outcomes of a parked call that never ran (docs/approvals.md), and the refusal of a
decision on a job not awaiting one (pure: `services.approvals` and the reconciler's rules
use them)."""

from __future__ import annotations

from ledger.codes import ApprovalCause, Code
from ledger.error_info import ErrorInfo, sentence
from ledger.events import WorkHalted


def denied_outcome(reason: str) -> WorkHalted:
    """A denied call's outcome: refused, ACCESS_DENIED, nothing ran."""
    return WorkHalted(
        attempt=0,
        error=ErrorInfo(
            code=Code.ACCESS_DENIED,
            dependency="approval",
            operation="approve the call",
            required_capability="approval",
            fix="do not repeat the call as it was; change it to address the approver's reason, "
            "or ask the approver, then submit again",
            message=sentence(f"A person denied this call: {reason}") + " Nothing ran.",
            cause=ApprovalCause.DENIED.value,
        ),
    )


def expired_outcome() -> WorkHalted:
    """A parked call nobody decided before its `expires_at`: refused, nothing ran."""
    return WorkHalted(
        attempt=0,
        error=ErrorInfo(
            code=Code.DEADLINE_EXCEEDED,
            dependency="approval",
            operation="approve the call",
            required_capability="approval",
            retryable=True,
            fix="submit again when an approver can decide it (GET /v1/approvals lists what "
            "waits), or with a longer start_within_s if the tool allows it",
            message="Nobody approved or denied this call before it expired; nothing ran.",
            cause=ApprovalCause.EXPIRED.value,
        ),
    )


def refusal(cause: str, fix: str) -> ErrorInfo:
    """The typed error of a decision refused (NOT_DECIDABLE, `cause` the first decision or
    the job's status)."""
    return ErrorInfo(
        code=Code.NOT_DECIDABLE,
        dependency="ledger",
        operation="decide the approval",
        fix=fix,
        message=f"The job is not awaiting approval ({cause}); nothing was changed.",
        cause=cause,
    )

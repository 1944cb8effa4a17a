"""Small builders for events used across the test suites."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

from ledger.codes import Code
from ledger.error_info import ErrorInfo
from ledger.events import (
    JobAccepted,
    NewEvent,
    Payload,
    WorkFailed,
    WorkStarted,
    WorkSucceeded,
    job_stream,
)

# The `error` object's ten keys (DESIGN §3), as the contract states them.
ERROR_KEYS = frozenset(
    {
        "code",
        "dependency",
        "operation",
        "retryable",
        "required_capability",
        "safe_fallback",
        "fix",
        "message",
        "retry_after_s",
        "cause",
    }
)


def new(payload: Payload, actor: str = "test") -> NewEvent:
    return NewEvent(payload=payload, actor=actor)  # type: ignore[arg-type]


def accepted(account: str = "acme", tool: str = "tracker.read_issue", **args: object) -> NewEvent:
    return new(JobAccepted(account=account, tool=tool, args={"issue_ref": "T-1", **args}))


def started(attempt: int = 1, lease_s: float = 30) -> NewEvent:
    lease = datetime.now(UTC) + timedelta(seconds=lease_s)
    return new(WorkStarted(attempt=attempt, worker="w-1", lease_expires_at=lease), "worker:w-1")


def succeeded(attempt: int = 1, **result: object) -> NewEvent:
    return new(WorkSucceeded(attempt=attempt, result=dict(result)), "worker:w-1")


def failed(code: Code = Code.ACCESS_DENIED, attempt: int = 1) -> NewEvent:
    error = ErrorInfo(code=code, dependency="tracker", message="I could not read the item.")
    return new(WorkFailed(attempt=attempt, error=error), "worker:w-1")


def fresh_job_stream() -> str:
    return job_stream(uuid.uuid4())

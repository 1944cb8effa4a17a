"""The job read model (`JobView`) and the envelope agents read. The fold that makes the view
from a job stream's events is `ledger.job_fold`.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from ledger.budget import BudgetNote
from ledger.codes import Code, NextAction, Status, next_action
from ledger.error_info import ErrorInfo
from ledger.events import (
    Cancellation,
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

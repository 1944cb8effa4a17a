"""Event payloads (one frozen model per event type, tagged by `type`) and recorded events.

The job-stream types below are the whole contract of contract §2: a new one is a contract change.
"""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter

from ledger.budget import BudgetNote
from ledger.codes import Code, OutcomeMissingCause
from ledger.error_info import ErrorInfo
from ledger.tracing import TraceRecord
from ledger.uuid7 import uuid7

JSONDict = dict[str, Any]


def _unset(value: object) -> bool:
    return value is None


# Fields added after events were first recorded: left out while unset, so that an event
# without them is stored exactly as before.
def _added(default: None = None) -> Any:
    return Field(default, exclude_if=_unset)


class Payload(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    type: str

    @property
    def code(self) -> Code | None:
        """The failure or refusal code, stored in its own column."""
        error = getattr(self, "error", None)
        return error.code if isinstance(error, ErrorInfo) else None


# --- job stream: the decision -------------------------------------------------------------


class ApprovalAsk(BaseModel):
    """A call parked for a person (docs/approvals.md): why, and until when it may wait."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    reason: str
    expires_at: datetime  # refused (approval_expired) if nobody decides before


class JobAccepted(Payload):
    type: Literal["job.accepted"] = "job.accepted"
    account: str
    tool: str
    args: JSONDict
    idempotency_key: str | None = None
    request_hash: str | None = None
    spends: bool = False
    timeout_s: float = 300.0
    max_attempts: int = 3
    # Closed as never started if no worker starts it within this (ledger.queueing); None in
    # decisions recorded before start deadlines were.
    start_within_s: float | None = _added()
    # JSON pointers of the declared secrets in `args`, each sealed there (`ledger.secrets`);
    # None: recorded before secrets were declared (pages then show no argument value).
    secret_paths: list[str] | None = _added()
    budget_bytes: int | None = _added()  # the agent's budget for the answer, when it set one
    # The job's trace (ledger.tracing): the worker's spans continue it. None: recorded with
    # no trace context (no caller's `traceparent`, tracing off), or before traces were.
    trace: TraceRecord | None = _added()
    # Set when the tool asked a person to approve this call first: it waits, undispatched,
    # until `job.approval_decided` (docs/approvals.md).
    approval: ApprovalAsk | None = _added()
    turn: str | None = _added()  # the agent's turn (`Outcomes-Turn`, docs/turns.md)
    # `Outcomes-Turn-Halt: on-failure`: a failed or unknown spending call halts the turn.
    turn_halt: bool | None = _added()


class JobRefused(Payload):
    type: Literal["job.refused"] = "job.refused"
    account: str
    tool: str
    args: JSONDict = Field(default_factory=dict)
    idempotency_key: str | None = None
    request_hash: str | None = None
    spends: bool = False
    error: ErrorInfo
    secret_paths: list[str] | None = _added()  # as in JobAccepted
    trace: TraceRecord | None = _added()  # as in JobAccepted
    turn: str | None = _added()  # as in JobAccepted


class JobApprovalDecided(Payload):
    """A person's decision on a parked call (docs/approvals.md): `approved` dispatches it,
    `denied` is followed in the same append by its outcome (`work.halted`, ACCESS_DENIED,
    cause `approval_denied`). The event's actor is the deciding token's id."""

    type: Literal["job.approval_decided"] = "job.approval_decided"
    decision: Literal["approved", "denied"]
    reason: str
    token_id: str  # the deciding token
    account: str  # the deciding token's account (`*`: the whole deployment)
    role: str  # approver or operator


# --- job stream: the work -----------------------------------------------------------------


class WorkStarted(Payload):
    type: Literal["work.started"] = "work.started"
    attempt: int
    worker: str
    lease_expires_at: datetime


class WorkSucceeded(Payload):
    type: Literal["work.succeeded"] = "work.succeeded"
    attempt: int
    result: JSONDict = Field(default_factory=dict)
    budget: BudgetNote | None = _added()  # set when the answer was cut to fit its budget


class Cancellation(BaseModel):
    """Who cancelled a job before it started (`work.declined` with `cancelled`): nothing ran."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    account: str  # the canceller's account (`*`: an operator of the whole deployment)
    role: str  # agent or operator
    reason: str | None = None  # as the canceller gave it (control characters refused)


class WorkDeclined(Payload):
    type: Literal["work.declined"] = "work.declined"
    attempt: int
    reason: str
    result: JSONDict = Field(default_factory=dict)
    budget: BudgetNote | None = _added()
    # Set when the caller cancelled the job before any worker started it (docs/cancel.md):
    # declined on purpose, by the caller rather than by the tool.
    cancelled: Cancellation | None = _added()


class WorkPartial(Payload):
    type: Literal["work.partial"] = "work.partial"
    attempt: int
    result: JSONDict = Field(default_factory=dict)
    processed: int
    skipped: list[str] = Field(default_factory=list)
    total: int | None = None
    budget: BudgetNote | None = _added()


class WorkFailed(Payload):
    type: Literal["work.failed"] = "work.failed"
    attempt: int
    error: ErrorInfo
    detail: str | None = None  # raw exception text, secrets scrubbed; operators only
    fingerprint: str | None = None


class WorkHalted(Payload):
    type: Literal["work.halted"] = "work.halted"
    attempt: int
    error: ErrorInfo


class WorkRetryScheduled(Payload):
    type: Literal["work.retry_scheduled"] = "work.retry_scheduled"
    attempt: int
    error: ErrorInfo
    detail: str | None = None
    fingerprint: str | None = None
    due_at: datetime


class WorkLateOutcome(Payload):
    type: Literal["work.late_outcome"] = "work.late_outcome"
    attempt: int
    outcome_type: str
    outcome: JSONDict
    late_code: Code | None = None

    @property
    def code(self) -> Code | None:
        return self.late_code


# --- job stream: reconciliation -----------------------------------------------------------


class JobRedispatched(Payload):
    type: Literal["job.redispatched"] = "job.redispatched"
    dispatch: int
    reason: str
    # What showed the confirmed message gone (ledger.queueing.Evidence); None in re-dispatches
    # recorded before, which a timer decided.
    evidence: str | None = _added()


class JobOutcomeMissing(Payload):
    type: Literal["job.outcome_missing"] = "job.outcome_missing"
    attempt: int
    cause: OutcomeMissingCause
    error: ErrorInfo
    detail: str | None = None


# --- brake and token streams --------------------------------------------------------------


class BrakePulled(Payload):
    type: Literal["brake.pulled"] = "brake.pulled"
    brake_id: str
    scope: str
    reason: str
    operator: str


class BrakeReleased(Payload):
    type: Literal["brake.released"] = "brake.released"
    brake_id: str
    reason: str
    operator: str


class TokenCreated(Payload):
    type: Literal["token.created"] = "token.created"
    token_id: str
    account: str
    role: str
    tools: list[str] | None = None
    token_hash: str


class TokenRevoked(Payload):
    type: Literal["token.revoked"] = "token.revoked"
    token_id: str


# --- webhook streams (docs/webhooks.md) ---------------------------------------------------


class WebhookRegistered(Payload):
    type: Literal["webhook.registered"] = "webhook.registered"
    webhook_id: str
    account: str
    url: str
    secret: str  # sealed under the secrets key (ledger.webhooks), never the secret itself


class WebhookRemoved(Payload):
    type: Literal["webhook.removed"] = "webhook.removed"
    webhook_id: str


class WebhookDisabled(Payload):
    type: Literal["webhook.disabled"] = "webhook.disabled"
    webhook_id: str
    reason: str


AnyPayload = Annotated[
    JobAccepted
    | JobRefused
    | JobApprovalDecided
    | WorkStarted
    | WorkSucceeded
    | WorkDeclined
    | WorkPartial
    | WorkFailed
    | WorkHalted
    | WorkRetryScheduled
    | WorkLateOutcome
    | JobRedispatched
    | JobOutcomeMissing
    | BrakePulled
    | BrakeReleased
    | TokenCreated
    | TokenRevoked
    | WebhookRegistered
    | WebhookRemoved
    | WebhookDisabled,
    Field(discriminator="type"),
]
_PAYLOAD = TypeAdapter(AnyPayload)

JOB_EVENT_TYPES = frozenset(
    {
        "job.accepted",
        "job.refused",
        "job.approval_decided",
        "work.started",
        "work.succeeded",
        "work.declined",
        "work.partial",
        "work.failed",
        "work.halted",
        "work.retry_scheduled",
        "work.late_outcome",
        "job.redispatched",
        "job.outcome_missing",
    }
)
# At most one of these per job; the database enforces it (contract §2).
TERMINAL_EVENT_TYPES = frozenset(
    {
        "job.refused",
        "work.succeeded",
        "work.declined",
        "work.partial",
        "work.failed",
        "work.halted",
        "job.outcome_missing",
    }
)


def parse_payload(data: JSONDict) -> Payload:
    """Rebuild the typed payload from an event's stored `data` (which carries `type`)."""
    payload: Payload = _PAYLOAD.validate_python(data)
    return payload


def job_stream(job_id: uuid.UUID | str) -> str:
    return f"job-{job_id}"


def job_id_of(stream_id: str) -> str:
    return stream_id.removeprefix("job-")


class NewEvent(BaseModel):
    """An event about to be appended. `event_id` is its identity: a retried write reuses it."""

    model_config = ConfigDict(frozen=True)

    payload: AnyPayload
    actor: str
    event_id: uuid.UUID = Field(default_factory=uuid7)


class RecordedEvent(BaseModel):
    """An event as the ledger holds it."""

    model_config = ConfigDict(frozen=True)

    position: int
    stream_id: str
    stream_version: int
    event_id: uuid.UUID
    type: str
    data: JSONDict
    code: Code | None
    actor: str
    recorded_at: datetime
    prev_hash: str | None
    hash: str
    # The ledger-wide link (ledger.chain.ledger_link); None until the store has recorded it.
    ledger_hash: str | None = None
    # Where the row was written, when that is not its ledger position: on Postgres writers take
    # positions at insert and the sequencer gives ledger positions after commit. None: the
    # event was sequenced at write (SQLite, memory), or read from its stream as written.
    write_position: int | None = None

    @property
    def stored_position(self) -> int:
        """The position the row was written at: what read models record (`ledger_position`),
        the same whether the event is read from its stream or in ledger order."""
        return self.position if self.write_position is None else self.write_position

    @property
    def payload(self) -> Payload:
        return parse_payload(self.data)

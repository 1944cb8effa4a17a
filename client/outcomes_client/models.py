"""The contract's documents as the client reads them (docs/contract.md §3, §6).

Extra fields are ignored, so a newer server that adds one does not break an older client."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

Status = Literal[
    "awaiting_approval",
    "queued",
    "running",
    "retrying",
    "succeeded",
    "declined",
    "partial",
    "refused",
    "failed",
]
NextAction = Literal[
    "wait",
    "accept",
    "use_partial_and_narrow",
    "satisfy_precondition",
    "stop_and_report",
    "verify_at_source",
]


class _Document(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)


class ErrorInfo(_Document):
    """The envelope's `error`: always these ten keys. `code` stays a string: codes may grow."""

    code: str
    dependency: str | None = None
    operation: str | None = None
    retryable: bool = False
    required_capability: str | None = None
    safe_fallback: str | None = None
    fix: str | None = None
    message: str
    retry_after_s: int | None = None
    cause: str | None = None


class PartialInfo(_Document):
    processed: int
    skipped: list[str]
    total: int | None = None


class Omission(_Document):
    """One place of a budgeted answer that was cut: `kept` of `total` items, keys or chars."""

    path: str
    unit: str
    kept: int
    total: int


class Budget(_Document):
    """The envelope's `budget`: the answer was cut to fit `budget_bytes`. Use what came back,
    then narrow the request (`narrow` says how)."""

    budget_bytes: int
    answer_bytes: int
    kept_bytes: int
    omitted_bytes: int
    omitted_items: int
    omitted: list[Omission] = []
    narrow: str


class LateOutcome(_Document):
    """An outcome that arrived after the job ended: kept, never changing the status."""

    attempt: int
    type: str
    result: dict[str, Any] | None = None
    reason: str | None = None
    processed: int | None = None
    skipped: list[str] | None = None
    total: int | None = None
    error: ErrorInfo | None = None
    cause: str | None = None
    budget: Budget | None = None


class Waiting(_Document):
    """A queued or retrying job's wait: how long so far, the deadline by which a worker must
    start it (else it ends `OUTCOME_MISSING`, `never_started`), whether the broker confirmed
    its message. Late is not lost: keep waiting."""

    since: datetime
    seconds: float
    start_by: datetime
    dispatch: Literal["confirmed", "unconfirmed"]
    dispatches: int


class Approval(_Document):
    """A call parked for a person's approval: why, until when, and the decision once made."""

    reason: str
    requested_at: datetime
    expires_at: datetime
    decision: Literal["approved", "denied", "expired"] | None = None
    decided_by: str | None = None
    decided_at: datetime | None = None
    decision_reason: str | None = None


class Envelope(_Document):
    """`GET /v1/jobs/{id}`: one job's state and the agent's next move."""

    job_id: str
    account: str
    tool: str
    status: Status
    terminal: bool
    attempts: int
    next_action: NextAction
    result: dict[str, Any] | None = None
    declined_reason: str | None = None
    partial: PartialInfo | None = None
    error: ErrorInfo | None = None
    recorded_by: str
    created_at: datetime
    updated_at: datetime
    late_outcomes: list[LateOutcome] = []
    waiting: Waiting | None = None
    budget: Budget | None = None  # null: the answer came back whole
    approval: Approval | None = None  # null: the tool asked no person to approve this call


class TurnCall(_Document):
    job_id: str
    tool: str
    status: Status
    code: str | None = None
    next_action: NextAction


class TurnFailure(_Document):
    job_id: str
    tool: str
    error: ErrorInfo | None = None
    next_action: NextAction


class Turn(_Document):
    """`GET /v1/turns/{id}`: what a whole turn of calls did (docs/turns.md). `all_succeeded`
    is true only when every call ended and each succeeded or was declined."""

    turn_id: str
    calls: list[TurnCall]
    counts: dict[str, int]
    complete: bool
    all_succeeded: bool
    already_happened: list[str]
    first_failure: TurnFailure | None = None
    summary: str
    halt: dict[str, Any] | None = None
    truncated: bool = False


class Submission(_Document):
    """The decision `POST /v1/jobs` recorded: `queued`, or `refused` with the error naming the
    missing precondition and its fix (a refusal is a recorded decision, not a transport
    error: poll `job_id` and the envelope says the same)."""

    job_id: str
    status: Literal["awaiting_approval", "queued", "refused"]
    poll_url: str
    error: ErrorInfo | None = None

    @property
    def refused(self) -> bool:
        return self.status == "refused"

    @property
    def next_action(self) -> NextAction:
        return "satisfy_precondition" if self.refused else "wait"


class JobEvent(_Document):
    stream_version: int
    type: str
    code: str | None = None
    recorded_at: datetime
    data: dict[str, Any]
    position: int | None = None  # operators and auditors only


class JobEvents(_Document):
    job_id: str
    events: list[JobEvent]


class JobPage(_Document):
    """`GET /v1/jobs?after=CURSOR`: jobs whose last change follows the cursor, in commit order."""

    items: list[Envelope]
    next_cursor: str | None
    count: int
    truncated: bool


class Change(_Document):
    """One job from the changes feed and a cursor to resume from that never skips a change:
    the page's `next_cursor` on its last job, the cursor the page was read after on the
    others (resuming there may show a few jobs again, never miss one)."""

    job: Envelope
    cursor: str | None


class Problem(_Document):
    """An HTTP error (`application/problem+json`, RFC 9457, with the ledger's members)."""

    type: str
    title: str
    status: int
    detail: str
    job_id: str | None = None
    error: ErrorInfo


class CancelRefusal(Problem):
    """409 NOT_CANCELLABLE from `POST /v1/jobs/{id}/cancel`: the job had started or ended and
    was left as it is; `job` is its envelope."""

    job: Envelope

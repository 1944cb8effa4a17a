"""Request and response bodies of the HTTP API (contract §6), as documented in /openapi.json."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field
from pydantic_core import PydanticCustomError

from ledger import identifiers
from ledger.codes import Code, Status
from ledger.error_info import ErrorInfo
from ledger.job_view import JobEnvelope
from ledger.queueing import MAX_START_WITHIN_S, MIN_START_WITHIN_S

# No control characters (NUL above all: neither database stores it in text), nor bidirectional
# controls or zero-width characters (`ledger.identifiers`).
PRINTABLE = identifiers.PATTERN
ACCOUNT = r"^[a-z0-9][a-z0-9_-]*$"


def _visible(what: str) -> AfterValidator:
    """PRINTABLE as a check that names the character it refuses by code point (a `pattern`
    constraint would only say that the text does not match)."""

    def checked(text: str) -> str:
        if (reason := identifiers.problem(what, text)) is not None:
            raise PydanticCustomError("unsafe_character", reason)
        return text

    return AfterValidator(checked)


visible = _visible  # the same check, for the bodies other route modules declare


class Documented(BaseModel):
    """Response models whose every field is always sent: the document says so."""

    model_config = ConfigDict(json_schema_serialization_defaults_required=True)


class SubmitBody(BaseModel):
    """`POST /v1/jobs`."""

    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={
            "examples": [
                {
                    "tool": "tracker.read_issue",
                    "args": {"issue_ref": "T-1"},
                    "idempotency_key": "plan-for-T-1",
                }
            ]
        },
    )

    tool: Annotated[
        str,
        Field(min_length=1, max_length=200, json_schema_extra={"pattern": PRINTABLE}),
        _visible("the tool name"),
    ]
    args: dict[str, Any]
    idempotency_key: (
        Annotated[
            str,
            Field(min_length=1, max_length=200, json_schema_extra={"pattern": PRINTABLE}),
            _visible("the idempotency key"),
        ]
        | None
    ) = None
    start_within_s: Annotated[
        float | None,
        Field(
            ge=MIN_START_WITHIN_S,
            le=MAX_START_WITHIN_S,
            allow_inf_nan=False,
            description=(
                "Seconds the job may wait for a worker before it is closed as never started "
                "(OUTCOME_MISSING, never_started); capped by the tool's own (its catalog "
                "entry's start_within_s, 600 by default). A backlog that would not start it "
                "in time is refused now (429 QUOTA_EXCEEDED, cause backlog, Retry-After)."
            ),
        ),
    ] = None
    budget_bytes: Annotated[
        int | None,
        Field(
            strict=True,
            description="The most the answer may take, as JSON bytes: at most the tool's "
            "`max_result_bytes` (at least 256); a bigger answer comes back cut to fit, and "
            "its envelope's `budget` says what was left out",
        ),
    ] = None
    dry_run: bool = Field(
        default=False,
        strict=True,
        description="true: answer 200 {would: accepted|awaiting_approval|refused, error, "
        "approval} and record nothing, count no quota (docs/turns.md)",
    )


class SubmitAccepted(Documented):
    job_id: uuid.UUID
    status: Status
    poll_url: str


class DryRunApproval(BaseModel):
    reason: str


class DryRunAnswer(Documented):
    """`POST /v1/jobs` with `dry_run: true`: what the decision would be now; nothing recorded."""

    would: Literal["accepted", "awaiting_approval", "refused"]
    error: ErrorInfo | None = Field(description="The refusal it would record, if refused")
    approval: DryRunApproval | None = Field(
        description="Why a person would have to approve it, if it would be parked"
    )


class ByRole(BaseModel):
    """Response models with fields only some callers get: those fields are not required."""


class JobPage(Documented):
    items: list[JobEnvelope]
    next_cursor: str | None = Field(
        description="Pass as `after` for the next page (opaque; null: no page read yet)"
    )
    count: int
    truncated: bool = Field(description="True when the limit or the byte budget cut the page")


class JobEvent(ByRole):
    stream_version: int = Field(description="The event's number in the job's own stream")
    type: str
    code: Code | None
    recorded_at: datetime
    data: dict[str, Any]
    position: int | None = Field(None, description="Operators and auditors only")


class JobEvents(Documented):
    job_id: uuid.UUID
    events: list[JobEvent]


class AuditEvent(ByRole):
    position: int
    stream_id: str
    stream_version: int
    event_id: uuid.UUID
    type: str
    code: Code | None
    actor: str
    recorded_at: datetime
    data: dict[str, Any]
    prev_hash: str | None = Field(None, description="Auditors only")
    hash: str | None = Field(None, description="Auditors only")


class EventPage(Documented):
    items: list[AuditEvent]
    next_cursor: int = Field(description="Pass as `after` for the next page")
    count: int
    truncated: bool = Field(description="True when the limit or the byte budget cut the page")


class Summary(Documented):
    jobs: int
    by_status: dict[str, int]
    by_code: dict[str, int]
    by_tool: dict[str, int]
    by_account: dict[str, int]


class Brake(Documented):
    brake_id: uuid.UUID
    scope: str
    reason: str
    operator: str
    pulled_at: datetime
    queued_jobs: int = Field(description="Jobs in the scope waiting to start (queued, retrying)")


class Brakes(Documented):
    brakes: list[Brake]


class Health(Documented):
    status: str


class Ready(Documented):
    status: str

"""Every error is `application/problem+json` (contract §6): type, title, status, detail, job_id
and the ten-key `error` object of the envelope. One builder, so no error answers differently:
`detail` is always the error's `message` (one sentence, said once, never two versions of it).
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

import orjson
from pydantic import BaseModel, ConfigDict, Field
from starlette.responses import Response

from ledger.bearer import bearer_challenge
from ledger.codes import Code
from ledger.error_info import ErrorInfo
from ledger.job_view import JobEnvelope

PROBLEM_JSON = "application/problem+json"
# A URN: the problem type names the code; it is not a page to fetch.
TYPE_PREFIX = "urn:outcome-ledger:problem:"

TITLES = {
    Code.INPUT_MISSING: "Input missing",
    Code.REFERENCE_UNRESOLVED: "Reference unresolved",
    Code.CAPABILITY_UNAVAILABLE: "Capability unavailable",
    Code.ACCESS_DENIED: "Access denied",
    Code.SOURCE_UNRELIABLE: "Source unreliable",
    Code.INPUT_INVALID: "Input invalid",
    Code.QUOTA_EXCEEDED: "Quota exceeded",
    Code.BRAKE_ENGAGED: "Brake engaged",
    Code.OUTCOME_MISSING: "Outcome missing",
    Code.TOOL_CRASHED: "Tool crashed",
    Code.DEADLINE_EXCEEDED: "Deadline exceeded",
    Code.NOT_CANCELLABLE: "Not cancellable",
    Code.NOT_DECIDABLE: "Not decidable",
}


class ProblemError(ErrorInfo):
    """The `error` object as documented: all ten keys are always present."""

    model_config = ConfigDict(json_schema_serialization_defaults_required=True)


class Problem(BaseModel):
    """RFC 9457 problem details, with the ledger's `job_id` and `error` members."""

    model_config = ConfigDict(json_schema_serialization_defaults_required=True)

    type: str = Field(description="urn:outcome-ledger:problem:<code>")
    title: str
    status: int
    detail: str = Field(description="The same sentence as error.message")
    job_id: str | None = Field(description="The job recorded for this request, else null")
    error: ProblemError


class NotCancellableProblem(Problem):
    """A cancel refused: the job had started or ended, and was left as it is."""

    job: JobEnvelope = Field(description="The job's envelope as the cancel found it")


class NotDecidableProblem(Problem):
    """An approval decision refused: the job was not awaiting one, and was left as it is."""

    job: JobEnvelope = Field(description="The job's envelope; its `approval`, the first decision")


class ApiProblem(Exception):
    """Raised anywhere in a request to answer with a problem."""

    def __init__(
        self,
        status: int,
        error: ErrorInfo,
        *,
        job_id: str | None = None,
        headers: Mapping[str, str] | None = None,
        members: Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__(error.message)
        self.status = status
        self.error = error
        self.job_id = job_id
        self.headers = dict(headers or {})
        self.members = dict(members or {})  # extension members (RFC 9457 §3.2), after ours

    @property
    def detail(self) -> str:
        return self.error.message


def problem_body(
    status: int,
    error: ErrorInfo,
    job_id: str | None = None,
    members: Mapping[str, Any] | None = None,
) -> bytes:
    return orjson.dumps(
        {
            "type": TYPE_PREFIX + error.code.value.lower().replace("_", "-"),
            "title": TITLES[error.code],
            "status": status,
            "detail": error.message,
            "job_id": job_id,
            "error": error.model_dump(mode="json"),
            **(members or {}),
        }
    )


def problem_response(problem: ApiProblem) -> Response:
    body = problem_body(problem.status, problem.error, problem.job_id, problem.members)
    return Response(body, problem.status, headers=problem.headers, media_type=PROBLEM_JSON)


# --- the HTTP-level problems (contract §6) -----------------------------------------------------


def unauthorized(presented: bool = True) -> ApiProblem:
    error = ErrorInfo(
        code=Code.ACCESS_DENIED,
        dependency="ledger",
        operation="authenticate the request",
        required_capability="a valid bearer token",
        fix="send 'Authorization: Bearer <token>' with a token that exists and is not revoked",
        message="The request has no valid token.",
    )
    return ApiProblem(401, error, headers={"WWW-Authenticate": bearer_challenge(presented)})


def forbidden(needed: str, message: str) -> ApiProblem:
    error = ErrorInfo(
        code=Code.ACCESS_DENIED,
        dependency="ledger",
        operation="authorize the request",
        required_capability=needed,
        fix="use a token whose role and account allow this request",
        message=message,
    )
    return ApiProblem(403, error)


def job_not_found() -> ApiProblem:
    # The same body for an unknown id and for another account's id: nothing to tell apart.
    error = ErrorInfo(
        code=Code.REFERENCE_UNRESOLVED,
        dependency="ledger",
        operation="read the job",
        fix="use a job id returned by POST /v1/jobs to a token of the same account",
        message="No job with this id is visible to this token.",
    )
    return ApiProblem(404, error)


def job_archived(archived_at: datetime) -> ApiProblem:
    """410: the caller's own job, archived (another account's archived id is the plain 404)."""
    when = archived_at.isoformat()
    error = ErrorInfo(
        code=Code.REFERENCE_UNRESOLVED,
        dependency="ledger",
        operation="read the job",
        fix="ask an operator or auditor for the archive's files (docs/archive.md): "
        "`outcomes jobs show ID --archive DIR`",
        message=f"This job was archived at {when}; the ledger's database no longer holds it.",
    )
    return ApiProblem(410, error, members={"archived_at": when})


def not_cancellable(error: ErrorInfo, job: Mapping[str, Any]) -> ApiProblem:
    """409: the job had started or ended; nothing was changed. `job`: its envelope (`job_id`
    stays null: this request recorded nothing)."""
    return ApiProblem(409, error, members={"job": job})


def not_decidable(error: ErrorInfo, job: Mapping[str, Any]) -> ApiProblem:
    """409: the job is not awaiting approval (decided before: `job`'s approval says how)."""
    return ApiProblem(409, error, members={"job": job})


def turn_not_found() -> ApiProblem:
    error = ErrorInfo(
        code=Code.REFERENCE_UNRESOLVED,
        dependency="ledger",
        operation="read the turn",
        fix="use the turn id sent as Outcomes-Turn with this account's calls",
        message="No call of this account names this turn.",
    )
    return ApiProblem(404, error)


def webhook_not_found() -> ApiProblem:
    error = ErrorInfo(
        code=Code.REFERENCE_UNRESOLVED,
        dependency="ledger",
        operation="read the webhook",
        fix="use a webhook id returned by POST /v1/webhooks to a token of the same account",
        message="No webhook with this id is visible to this token.",
    )
    return ApiProblem(404, error)


def webhooks_unavailable(message: str) -> ApiProblem:
    error = ErrorInfo(
        code=Code.CAPABILITY_UNAVAILABLE,
        dependency="ledger",
        operation="seal the webhook's signing secret",
        required_capability="secrets key",
        retryable=True,
        fix="an operator sets OUTCOMES_SECRETS_KEY on the API (docs/secrets.md)",
        message=message[:1].upper() + message[1:] + ".",
        retry_after_s=60,
    )
    return ApiProblem(503, error, headers={"Retry-After": "60"})


def webhook_limit(limit: int) -> ApiProblem:
    """409: the account has as many webhooks as allowed; nothing was registered."""
    error = ErrorInfo(
        code=Code.QUOTA_EXCEEDED,
        dependency="ledger",
        operation="register the webhook",
        fix="remove a webhook the account no longer needs (GET /v1/webhooks, then DELETE "
        "/v1/webhooks/{id}), or ask the operator to raise OUTCOMES_MAX_WEBHOOKS_PER_ACCOUNT",
        message=f"The account already has {limit} webhooks, the most this deployment allows; "
        "nothing was registered.",
        cause="webhook_limit",
    )
    return ApiProblem(409, error)


def route_not_found() -> ApiProblem:
    error = ErrorInfo(
        code=Code.REFERENCE_UNRESOLVED,
        dependency="ledger",
        operation="route the request",
        fix="use a path listed in /openapi.json",
        message="There is nothing at this path.",
    )
    return ApiProblem(404, error)


def method_not_allowed(method: str, allowed: list[str]) -> ApiProblem:
    error = ErrorInfo(
        code=Code.CAPABILITY_UNAVAILABLE,
        dependency="ledger",
        operation=f"{method} on this path",
        fix=f"use one of: {', '.join(allowed)}" if allowed else "see /openapi.json",
        message=f"This path does not support {method}.",
    )
    return ApiProblem(405, error, headers={"Allow": ", ".join(allowed)})


def invalid_input(message: str, *, missing: bool = False, fix: str | None = None) -> ApiProblem:
    error = ErrorInfo(
        code=Code.INPUT_MISSING if missing else Code.INPUT_INVALID,
        dependency="ledger",
        operation="read the request",
        fix=fix or "correct the request to match /openapi.json",
        message=message,
    )
    return ApiProblem(422, error)


def unknown_query(names: list[str], allowed: list[str]) -> ApiProblem:
    """422: a query parameter the route does not take (issue 47: `?dry_run=1` ran for real,
    `?wiat=30` answered at once), refused as an unknown body field is."""
    said = ", ".join(repr(name[:40]) for name in names[:5])
    takes = f"it takes {', '.join(allowed)}" if allowed else "it takes none"
    return invalid_input(
        f"Unknown query parameter {said}: {takes}.",
        fix="remove the parameter, or spell it as /openapi.json does",
    )


def malformed_json() -> ApiProblem:
    """400: the body is not well-formed JSON (a document that parses but breaks the schema is
    a 422: the request was read, and is wrong)."""
    error = ErrorInfo(
        code=Code.INPUT_INVALID,
        dependency="ledger",
        operation="read the request body",
        fix="send one well-formed JSON document (RFC 8259: no NaN, no trailing commas)",
        message="The request body is not valid JSON.",
    )
    return ApiProblem(400, error)


def bad_request(message: str = "The request could not be read.") -> ApiProblem:
    error = ErrorInfo(
        code=Code.INPUT_INVALID,
        dependency="ledger",
        operation="read the request",
        fix="send a well-formed HTTP request as /openapi.json describes",
        message=message,
    )
    return ApiProblem(400, error)


def too_large(limit: int) -> ApiProblem:
    error = ErrorInfo(
        code=Code.INPUT_INVALID,
        dependency="ledger",
        operation="read the request body",
        fix=f"send a body of at most {limit} bytes",
        message="The request body is too large.",
    )
    return ApiProblem(413, error)


def unsupported_media_type() -> ApiProblem:
    error = ErrorInfo(
        code=Code.INPUT_INVALID,
        dependency="ledger",
        operation="read the request body",
        fix="send the body as JSON with 'Content-Type: application/json'",
        message="The request body must be JSON (Content-Type: application/json).",
    )
    return ApiProblem(415, error)


def unavailable(message: str = "The ledger's database is unavailable.") -> ApiProblem:
    error = ErrorInfo(
        code=Code.SOURCE_UNRELIABLE,
        dependency="database",
        operation="read or record in the ledger",
        retryable=True,
        fix="retry shortly; an operator should check the database",
        message=message,
        retry_after_s=1,
    )
    return ApiProblem(503, error, headers={"Retry-After": "1"})


def internal_error() -> ApiProblem:
    error = ErrorInfo(
        code=Code.SOURCE_UNRELIABLE,
        dependency="ledger",
        operation="answer the request",
        fix="report it to an operator; the server logged the cause",
        message="The ledger failed to answer this request.",
    )
    return ApiProblem(500, error)

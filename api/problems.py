"""Every error is `application/problem+json` (contract §6): type, title, status, detail, job_id
and the ten-key `error` object of the envelope. One builder, so no error answers differently.
"""

from __future__ import annotations

from collections.abc import Mapping

import orjson
from pydantic import BaseModel, ConfigDict, Field
from starlette.responses import Response

from ledger.codes import Code
from ledger.error_info import ErrorInfo

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
    detail: str
    job_id: str | None = Field(description="The job recorded for this request, else null")
    error: ProblemError


class ApiProblem(Exception):
    """Raised anywhere in a request to answer with a problem."""

    def __init__(
        self,
        status: int,
        error: ErrorInfo,
        detail: str | None = None,
        *,
        job_id: str | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(detail or error.message)
        self.status = status
        self.error = error
        self.detail = detail or error.message
        self.job_id = job_id
        self.headers = dict(headers or {})


def problem_body(
    status: int, error: ErrorInfo, detail: str | None = None, job_id: str | None = None
) -> bytes:
    return orjson.dumps(
        {
            "type": TYPE_PREFIX + error.code.value.lower().replace("_", "-"),
            "title": TITLES[error.code],
            "status": status,
            "detail": detail or error.message,
            "job_id": job_id,
            "error": error.model_dump(mode="json"),
        }
    )


def problem_response(problem: ApiProblem) -> Response:
    body = problem_body(problem.status, problem.error, problem.detail, problem.job_id)
    return Response(body, problem.status, headers=problem.headers, media_type=PROBLEM_JSON)


# --- the HTTP-level problems (contract §6) -----------------------------------------------------


def unauthorized() -> ApiProblem:
    error = ErrorInfo(
        code=Code.ACCESS_DENIED,
        dependency="ledger",
        operation="authenticate the request",
        required_capability="a valid bearer token",
        fix="send 'Authorization: Bearer <token>' with a token that exists and is not revoked",
        message="The request has no valid token.",
    )
    return ApiProblem(401, error, headers={"WWW-Authenticate": "Bearer"})


def forbidden(needed: str, detail: str) -> ApiProblem:
    error = ErrorInfo(
        code=Code.ACCESS_DENIED,
        dependency="ledger",
        operation="authorize the request",
        required_capability=needed,
        fix="use a token whose role and account allow this request",
        message="This token may not do this.",
    )
    return ApiProblem(403, error, detail)


def job_not_found() -> ApiProblem:
    # The same body for an unknown id and for another account's id: nothing to tell apart.
    error = ErrorInfo(
        code=Code.REFERENCE_UNRESOLVED,
        dependency="ledger",
        operation="read the job",
        fix="use a job id returned by POST /v1/jobs to a token of the same account",
        message="No such job.",
    )
    return ApiProblem(404, error, "No job with this id is visible to this token.")


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

"""Exception handlers: whatever goes wrong, the answer is a problem+json (contract §6).

The framework's own errors (unknown route, wrong method, validation) are translated here too.
Nothing a caller sent is echoed back: only field names and kinds of mistakes.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from fastapi import FastAPI
from fastapi.exceptions import RequestValidationError
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Match

from api.auth import authenticate
from api.problems import (
    ApiProblem,
    bad_request,
    forbidden,
    internal_error,
    invalid_input,
    job_archived,
    job_not_found,
    malformed_json,
    method_not_allowed,
    not_cancellable,
    not_decidable,
    problem_response,
    route_not_found,
    turn_not_found,
    unauthorized,
    unavailable,
    webhook_limit,
    webhook_not_found,
    webhooks_unavailable,
)
from ledger import approvals
from ledger.errors import (
    IdempotencyConflictError,
    InvalidCursorError,
    InvalidEventError,
    JobArchivedError,
    JobNotFoundError,
    LedgerError,
    NotAuthenticatedError,
    NotCancellableError,
    NotDecidableError,
    RateLimitedError,
    SchemaMissingError,
    SelfApprovalError,
    StorageUnavailableError,
    ToolNotGrantedError,
    TurnNotFoundError,
    WebhookLimitError,
    WebhookNotFoundError,
    WebhookTargetError,
    WebhookUnavailableError,
)
from ledger.services import cancel

log = logging.getLogger(__name__)


def install(app: FastAPI) -> None:
    app.add_exception_handler(ApiProblem, _on_problem)
    app.add_exception_handler(HTTPException, _on_http)
    app.add_exception_handler(RequestValidationError, _on_validation)
    app.add_exception_handler(LedgerError, _on_ledger)
    app.add_exception_handler(Exception, _on_crash)


async def answer_error(request: Request, exc: Exception) -> Response:
    """What the handlers installed above answer for `exc`, for a route served outside the
    framework's stack (api.fast_path): the same problem, status and headers."""
    if isinstance(exc, ApiProblem):
        return await _on_problem(request, exc)
    if isinstance(exc, LedgerError):
        return await _on_ledger(request, exc)
    return await _on_crash(request, exc)


async def _on_problem(_request: Request, exc: Exception) -> Response:
    assert isinstance(exc, ApiProblem)
    return problem_response(exc)


async def _on_http(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    if exc.status_code == 404:
        return problem_response(route_not_found())
    if exc.status_code == 405:
        return problem_response(method_not_allowed(request.method, _allowed(request)))
    if exc.status_code == 400:
        return problem_response(bad_request())
    return problem_response(invalid_input("The request could not be read."))


AUTHENTICATED = "/v1/"  # every route under it needs a token


async def _on_validation(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, RequestValidationError)
    if request.url.path.startswith(AUTHENTICATED):
        # Authentication comes before any other check (contract §6): routes that read the
        # token in their body (the long-poll) are validated by the framework first.
        try:
            await run_in_threadpool(authenticate, request)
        except LedgerError as failed:
            return await _on_ledger(request, failed)
    return problem_response(validation_problem(exc.errors()))


def validation_problem(errors: Sequence[Any]) -> ApiProblem:
    """422 naming the fields and what is wrong with them, never their values; 400 for a body
    that is not JSON at all (nothing was read, so no field is wrong)."""
    if any(e.get("type") == "json_invalid" for e in errors):
        return malformed_json()
    if errors and all(e.get("type") == "missing" for e in errors):
        names = ", ".join(_where(e.get("loc", ())) for e in errors)
        return invalid_input(f"The request is missing {names}.", missing=True, fix=f"send {names}")
    problems = "; ".join(
        f"{_where(e.get('loc', ()))}: {e.get('msg', 'invalid')}" for e in errors[:5]
    )
    return invalid_input(f"The request is invalid ({problems}).")


def _where(loc: Sequence[Any]) -> str:
    return ".".join(str(part) for part in loc) or "(body)"


async def _on_ledger(request: Request, exc: Exception) -> Response:
    """The ledger's typed errors, each to its one answer."""
    if isinstance(exc, NotAuthenticatedError):
        return problem_response(unauthorized(exc.presented))
    if isinstance(exc, TurnNotFoundError):
        return problem_response(turn_not_found())
    if isinstance(exc, JobArchivedError):
        return problem_response(job_archived(exc.archived_at))
    if isinstance(exc, JobNotFoundError):
        return problem_response(job_not_found())
    if isinstance(exc, NotCancellableError):
        wait = f"wait for its outcome (GET /v1/jobs/{exc.job_id}?wait=60&until=terminal)"
        read = f"GET /v1/jobs/{exc.job_id}"
        error = cancel.refusal(exc.status, wait, read)
        return problem_response(not_cancellable(error, exc.envelope))
    if isinstance(exc, NotDecidableError):
        look = f"read the job (GET /v1/jobs/{exc.job_id}): its approval holds the first decision"
        return problem_response(not_decidable(approvals.refusal(exc.cause, look), exc.envelope))
    if isinstance(exc, SelfApprovalError):
        return problem_response(
            forbidden(
                "approval:another-token",
                "The token that submitted a call cannot approve or deny it.",
            )
        )
    if isinstance(exc, IdempotencyConflictError):
        return problem_response(
            invalid_input(
                f"The idempotency key was already used with another body (job {exc.job_id}).",
                fix="use a new idempotency key for a different request",
            )
        )
    if isinstance(exc, ToolNotGrantedError):
        return problem_response(forbidden(f"tool:{exc.tool}", f"{str(exc).capitalize()}."))
    if isinstance(exc, RateLimitedError):  # nothing recorded: no job_id to name
        retry = str(exc.error.retry_after_s or 1)
        return problem_response(ApiProblem(429, exc.error, headers={"Retry-After": retry}))
    if isinstance(exc, InvalidCursorError):
        return problem_response(
            invalid_input(
                "The cursor is not one this API returned.",
                fix="pass a next_cursor from an earlier page, or no cursor to start over",
            )
        )
    if isinstance(exc, InvalidEventError):
        return problem_response(invalid_input("The request holds data the ledger cannot record."))
    if isinstance(exc, WebhookTargetError):
        return problem_response(
            invalid_input(
                f"The webhook URL is refused: {exc}.",
                fix="register a public http(s) URL (or list its host in "
                "OUTCOMES_WEBHOOK_ALLOW_HOSTS)",
            )
        )
    if isinstance(exc, WebhookNotFoundError):
        return problem_response(webhook_not_found())
    if isinstance(exc, WebhookLimitError):
        return problem_response(webhook_limit(exc.limit))
    if isinstance(exc, WebhookUnavailableError):
        return problem_response(webhooks_unavailable(str(exc)))
    if isinstance(exc, SchemaMissingError):
        log.error("ledger schema missing: run `outcomes migrate`")
        return problem_response(unavailable("The ledger is not set up."))
    if not isinstance(exc, StorageUnavailableError):
        log.warning("%s %s: ledger error %s", request.method, request.url.path, type(exc).__name__)
    return problem_response(unavailable())


async def _on_crash(request: Request, exc: Exception) -> Response:
    # The traceback goes to operators' logs; the caller gets no internals.
    log.error("%s %s failed", request.method, request.url.path, exc_info=exc)
    return problem_response(internal_error())


_METHODS = ("DELETE", "GET", "HEAD", "OPTIONS", "PATCH", "POST", "PUT")


def _allowed(request: Request) -> list[str]:
    """Every method some route serves at this path (Starlette names only the first route's).

    Asked of the router itself, through `matches`, so included routers are covered too."""
    routes = request.app.router.routes
    return [
        method
        for method in _METHODS
        if any(r.matches({**request.scope, "method": method})[0] is Match.FULL for r in routes)
    ]

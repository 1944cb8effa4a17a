"""`POST /v1/jobs/{job_id}/cancel`: a call that has not started ends declined on purpose
(docs/cancel.md). Agents of the job's account and operators of an account that covers it; a
job already running or ended is a 409 carrying its envelope, and is left as it is."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import Response

from api.auth import Principal, check_role
from api.handlers import validation_problem
from api.jobs_read import JobId
from api.limits import json_of
from api.models import PRINTABLE, visible
from api.openapi import problems
from api.problems import NotCancellableProblem
from api.state import state_of
from ledger.job_view import JobEnvelope, envelope
from ledger.services.cancel import CANCEL_ROLES, MAX_REASON_CHARS, Canceller, cancel

router = APIRouter(tags=["jobs"])

DESCRIPTIONS = {
    403: "The token is an auditor's: only agents and operators cancel (ACCESS_DENIED).",
    409: "The job is running or has ended and was left as it is; `job` is its envelope "
    "(NOT_CANCELLABLE, `cause` its status).",
}


class CancelBody(BaseModel):
    """`POST /v1/jobs/{job_id}/cancel` (the body is optional)."""

    model_config = ConfigDict(extra="forbid")

    reason: (
        Annotated[
            str,
            Field(
                max_length=MAX_REASON_CHARS,
                description="Why: recorded, and quoted in the job's declined_reason",
                json_schema_extra={"pattern": PRINTABLE},
            ),
            visible("the cancel reason"),
        ]
        | None
    ) = None


_REQUEST_BODY = {
    "required": False,
    "content": {"application/json": {"schema": CancelBody.model_json_schema()}},
}


@router.post(
    "/v1/jobs/{job_id}/cancel",
    response_model=JobEnvelope,
    summary="Cancel a job no worker has started: it ends declined (nothing ran)",
    responses={
        **problems(401, 403, 404, 413, 415, 422, 503, overrides=DESCRIPTIONS),
        409: {"model": NotCancellableProblem, "description": DESCRIPTIONS[409]},
    },
    openapi_extra={"requestBody": _REQUEST_BODY},
)
async def cancel_job(request: Request, job_id: JobId, caller: Principal) -> Response:
    check_role(caller, *CANCEL_ROLES)  # the token first: a caller without one learns nothing
    content = await request.body()
    # No body is no reason; a body is JSON, read as POST /v1/jobs reads its own (400, 415, 422).
    body = _parse(json_of(request.headers.get("content-type", ""), content)) if content else None
    reason = body.reason if body is not None else None
    by = Canceller.of_token(caller)
    view = await run_in_threadpool(cancel, state_of(request).ledger, job_id, by, reason)
    return Response(envelope(view).model_dump_json(), media_type="application/json")


def _parse(document: Any) -> CancelBody:
    try:
        return CancelBody.model_validate(document)
    except ValidationError as exc:
        raise validation_problem(exc.errors(include_input=False, include_url=False)) from None

"""`POST /v1/jobs`: the decision, recorded before it is answered (contract §6).

Accepted → 202 with the poll URL. Refused → the refusal is recorded and answered as a problem
carrying its job_id. The same idempotency key and body replays the first answer.
"""

from __future__ import annotations

from typing import Annotated, Any

import orjson
from fastapi import APIRouter, Depends
from pydantic import ValidationError
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import Response

from api.auth import require
from api.handlers import validation_problem
from api.limits import read_json
from api.models import SubmitAccepted, SubmitBody
from api.openapi import SUBMIT_DESCRIPTIONS, problems
from api.problems import ApiProblem, forbidden, invalid_input
from api.state import state_of
from ledger.access import ALL_ACCOUNTS
from ledger.codes import Code, Status
from ledger.decisions import Caller, JobRequest
from ledger.job_view import JobView
from ledger.services.submit import submit
from ledger.token_view import TokenView

router = APIRouter(tags=["jobs"])

REFUSAL_STATUS = {
    Code.INPUT_MISSING: 422,
    Code.INPUT_INVALID: 422,
    Code.CAPABILITY_UNAVAILABLE: 422,
    Code.ACCESS_DENIED: 403,
    Code.QUOTA_EXCEEDED: 429,
    Code.BRAKE_ENGAGED: 409,
}

_BODY_SCHEMA = SubmitBody.model_json_schema()
_REQUEST_BODY = {
    "required": True,
    "content": {"application/json": {"schema": _BODY_SCHEMA}},
}


def poll_url(job_id: str) -> str:
    return f"/v1/jobs/{job_id}"


@router.post(
    "/v1/jobs",
    status_code=202,
    response_model=SubmitAccepted,
    summary="Submit a job: accepted (202) or refused with its recorded job_id",
    responses={
        202: {
            "headers": {
                "Location": {
                    "description": "The poll URL",
                    "required": True,
                    "schema": {"type": "string"},
                }
            }
        },
        **problems(401, 403, 409, 413, 415, 422, 429, 503, overrides=SUBMIT_DESCRIPTIONS),
    },
    openapi_extra={"requestBody": _REQUEST_BODY},
)
async def submit_job(
    request: Request, agent: Annotated[TokenView, Depends(require("agent"))]
) -> Response:
    if agent.account == ALL_ACCOUNTS:
        raise forbidden("account", "Jobs belong to one account: use a token for that account.")
    body = _parse(await read_json(request))
    caller = Caller(
        account=agent.account,
        token_id=agent.token_id,
        tools=frozenset(agent.tools) if agent.tools is not None else None,
    )
    job = JobRequest(tool=body.tool, args=body.args, idempotency_key=body.idempotency_key)
    state = state_of(request)
    submitted = await run_in_threadpool(submit, state.ledger, caller, job, state.dispatcher)
    return answer(submitted.view)


def _parse(document: Any) -> SubmitBody:
    if not isinstance(document, dict):
        raise invalid_input("The body must be a JSON object with tool and args.")
    try:
        return SubmitBody.model_validate(document)
    except ValidationError as exc:
        raise validation_problem(exc.errors(include_input=False, include_url=False)) from None


def answer(view: JobView) -> Response:
    """The decision's answer; a replay gives the same one (same status, same job_id)."""
    if view.accepted:
        body = {
            "job_id": view.job_id,
            "status": Status.QUEUED.value,
            "poll_url": poll_url(view.job_id),
        }
        headers = {"Location": poll_url(view.job_id)}
        return Response(orjson.dumps(body), 202, headers, media_type="application/json")
    assert view.error is not None  # a refusal always names its code
    headers = {}
    if view.error.code is Code.QUOTA_EXCEEDED:
        headers["Retry-After"] = str(view.error.retry_after_s or 1)
    status = REFUSAL_STATUS.get(view.error.code, 422)
    raise ApiProblem(status, view.error, job_id=view.job_id, headers=headers)

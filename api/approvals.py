"""People in the loop (docs/approvals.md): `GET /v1/approvals` (the calls parked for a
person's approval, oldest first) and `POST /v1/jobs/{job_id}/approve` / `/deny` with a
reason. Approver and operator tokens only; never the token that submitted the call."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query
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
from api.problems import NotDecidableProblem, invalid_input
from api.state import state_of
from ledger.job_view import JobEnvelope, envelope
from ledger.services.approvals import (
    APPROVAL_ROLES,
    MAX_PENDING,
    MAX_REASON_CHARS,
    Approver,
    Decision,
    decide,
    pending,
)

router = APIRouter(tags=["approvals"])

DESCRIPTIONS = {
    403: "Not an approver's or operator's token, or the token that submitted the call "
    "(ACCESS_DENIED).",
    409: "The job is not awaiting approval and was left as it is; `job` is its envelope, "
    "whose `approval` holds the first decision (NOT_DECIDABLE, `cause` that decision or the "
    "job's status).",
}


class DecisionBody(BaseModel):
    """`POST /v1/jobs/{job_id}/approve` and `/deny`."""

    model_config = ConfigDict(extra="forbid")

    reason: Annotated[
        str,
        Field(
            min_length=1,
            max_length=MAX_REASON_CHARS,
            description="Why: recorded in the decision event, and quoted to the agent",
            json_schema_extra={"pattern": PRINTABLE},
        ),
        visible("the decision's reason"),
    ]


class ApprovalsPage(BaseModel):
    """`GET /v1/approvals`: the parked calls, oldest first."""

    items: list[JobEnvelope]
    count: int
    truncated: bool = Field(description="More are pending than `limit`")


_REQUEST_BODY = {
    "required": True,
    "content": {"application/json": {"schema": DecisionBody.model_json_schema()}},
}


@router.get(
    "/v1/approvals",
    response_model=ApprovalsPage,
    summary="The calls awaiting a person's approval, oldest first",
    responses=problems(401, 403, 422, 503, overrides=DESCRIPTIONS),
)
def list_approvals(
    request: Request,
    caller: Principal,
    account: Annotated[str | None, Query(max_length=100)] = None,
    tool: Annotated[str | None, Query(max_length=200)] = None,
    limit: Annotated[int, Query(ge=1, le=MAX_PENDING)] = 100,
) -> Response:
    check_role(caller, *APPROVAL_ROLES)
    ledger = state_of(request).ledger
    found = pending(ledger, caller.account, account=account, tool=tool, limit=limit + 1)
    items = [envelope(view) for view in found[:limit]]
    page = ApprovalsPage(items=items, count=len(items), truncated=len(found) > limit)
    return Response(page.model_dump_json(), media_type="application/json")


def _route(decision: Decision) -> Any:
    verb = "approve" if decision == "approved" else "deny"
    summary = (
        "Approve a parked call: it is queued and dispatched (the brake is re-checked at execution)"
        if decision == "approved"
        else "Deny a parked call: it ends refused (ACCESS_DENIED, approval_denied); nothing ran"
    )

    @router.post(
        f"/v1/jobs/{{job_id}}/{verb}",
        response_model=JobEnvelope,
        summary=summary,
        name=f"{verb}_job",
        responses={
            **problems(401, 403, 404, 413, 415, 422, 503, overrides=DESCRIPTIONS),
            409: {"model": NotDecidableProblem, "description": DESCRIPTIONS[409]},
        },
        openapi_extra={"requestBody": _REQUEST_BODY},
    )
    async def decide_job(request: Request, job_id: JobId, caller: Principal) -> Response:
        check_role(caller, *APPROVAL_ROLES)  # the token first
        content = await request.body()
        if not content:
            raise invalid_input(
                "A decision needs a body with its reason.", fix='send {"reason": "…"}'
            )
        body = _parse(json_of(request.headers.get("content-type", ""), content))
        by = Approver.of_token(caller)
        state = state_of(request)
        view = await run_in_threadpool(
            decide, state.ledger, job_id, by, decision, body.reason, state.outbox
        )
        return Response(envelope(view).model_dump_json(), media_type="application/json")

    return decide_job


approve_job = _route("approved")
deny_job = _route("denied")


def _parse(document: Any) -> DecisionBody:
    try:
        return DecisionBody.model_validate(document)
    except ValidationError as exc:
        raise validation_problem(exc.errors(include_input=False, include_url=False)) from None

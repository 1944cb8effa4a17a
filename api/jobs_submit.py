"""`POST /v1/jobs`: the decision, recorded before it is answered (contract §6).

Accepted → 202 with the poll URL. Refused → the refusal is recorded and answered as a problem
carrying its job_id. The same idempotency key and body replays the first answer.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qsl

import orjson
from fastapi import APIRouter
from pydantic import ValidationError
from starlette.requests import Request
from starlette.responses import Response

from api.auth import check_role, token_of
from api.handlers import validation_problem
from api.limits import json_of
from api.models import DryRunAnswer, SubmitAccepted, SubmitBody
from api.openapi import SUBMIT_DESCRIPTIONS, problems
from api.problems import ApiProblem, forbidden, invalid_input, unknown_query
from api.state import ApiState, state_of
from ledger.access import ALL_ACCOUNTS
from ledger.codes import Code, Status
from ledger.decisions import Caller, JobRequest, check_turn
from ledger.errors import InvalidEventError, NotAuthenticatedError, RateLimitedError
from ledger.job_view import JobView
from ledger.runtime.thread_hop import in_thread
from ledger.services import tokens
from ledger.services.preflight import Preflight, preflight
from ledger.services.submit import Submitted, submit
from ledger.tracing import TraceRecord, parse_traceparent

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
        200: {
            "model": DryRunAnswer,
            "description": "A dry run (`dry_run: true`): what the decision would be; nothing "
            "was recorded",
        },
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
    openapi_extra={"requestBody": _REQUEST_BODY, "security": [{"bearer": []}]},
)
async def submit_job(request: Request) -> Response:
    token = token_of(request)  # a missing or malformed header is a 401 before anything else
    content_type = request.headers.get("content-type", "")
    content = await request.body()
    state = state_of(request)
    # W3C Trace Context: the decision's span continues the caller's trace; a malformed
    # header is ignored (a new trace), never an error (docs/tracing.md).
    headers = request.headers
    trace = parse_traceparent(headers.get("traceparent"), headers.get("tracestate"))
    # One thread hop for the token's check and the decision (the hottest route: a dependency
    # would cost a hop and a resolution of its own). The token is checked first: a caller
    # without one learns nothing about the body.
    asked = Asked(
        headers.get("idempotency-key"),
        request.url.query,
        headers.get("outcomes-turn"),
        headers.get("outcomes-turn-halt"),
    )
    submitted = await in_thread(_submit, state, token, content_type, content, trace, asked)
    if isinstance(submitted, Preflight):  # a dry run: nothing was recorded
        return Response(orjson.dumps(submitted.as_json()), 200, media_type="application/json")
    return answer(submitted.view)


@dataclass(frozen=True)
class Asked:
    """What a submit says besides its body: the `Idempotency-Key` header (IETF draft, as
    Stripe's) and the query string, which takes no parameter."""

    idempotency_key: str | None = None
    query: str = ""
    turn: str | None = None  # `Outcomes-Turn` (docs/turns.md)
    turn_halt: str | None = None  # `Outcomes-Turn-Halt`: `on-failure`, or absent


def _submit(
    state: ApiState,
    token: str,
    content_type: str,
    content: bytes,
    trace: TraceRecord | None = None,
    asked: Asked | None = None,
) -> Submitted | Preflight:
    # Admitted without a read when this process knows the token: the decision's append
    # re-checks that it is not revoked (`recheck_token`), so a revoked token records nothing.
    agent = state.tokens.admit(token)
    try:
        check_role(agent, "agent")
        if agent.account == ALL_ACCOUNTS:
            raise forbidden("account", "Jobs belong to one account: use a token for that account.")
        asked = asked or Asked()
        if asked.query:
            unknown = sorted({key for key, _ in parse_qsl(asked.query, keep_blank_values=True)})
            raise unknown_query(unknown or [asked.query], [])
        body = _parse(json_of(content_type, content), asked.idempotency_key)
        turn, halt = turn_of(asked.turn, asked.turn_halt)
    except ApiProblem:
        # Nothing will be written to re-check the token: a revoked one hears 401, not this.
        _still_good(state, token)
        raise
    caller = Caller(
        account=agent.account,
        token_id=agent.token_id,
        tools=frozenset(agent.tools) if agent.tools is not None else None,
        recheck_token=True,
    )
    job = JobRequest(
        tool=body.tool,
        args=body.args,
        idempotency_key=body.idempotency_key,
        start_within_s=body.start_within_s,
        budget_bytes=body.budget_bytes,
        turn=turn,
        halt_on_failure=halt,
    )
    if body.dry_run:
        _still_good(state, token)  # nothing is written to re-check the token: a read
        return preflight(state.ledger, caller, job, state.outbox)
    try:
        return submit(state.ledger, caller, job, state.outbox, trace)
    except NotAuthenticatedError:
        state.tokens.forget(token)
        raise
    except RateLimitedError:
        # Refused before any append could re-check the token: a revoked one hears 401, not
        # 429 (a read only for a submit already refused).
        _still_good(state, token)
        raise


def turn_of(turn: str | None, halt: str | None) -> tuple[str | None, bool]:
    """The `Outcomes-Turn` and `Outcomes-Turn-Halt` headers (docs/turns.md), checked."""
    if halt is not None and halt.strip().lower() != "on-failure":
        raise invalid_input(
            "Outcomes-Turn-Halt takes one value: on-failure.",
            fix="send Outcomes-Turn-Halt: on-failure, or no such header",
        )
    if turn is None:
        if halt is not None:
            raise invalid_input(
                "Outcomes-Turn-Halt needs the turn it halts.", fix="send Outcomes-Turn too"
            )
        return None, False
    try:
        return check_turn(turn.strip()), halt is not None
    except InvalidEventError as exc:
        raise invalid_input(
            f"The Outcomes-Turn header is not a turn id: {exc}.",
            fix="send 1 to 128 letters, digits, '.', '_', ':' or '-'",
        ) from None


def _still_good(state: ApiState, token: str) -> None:
    try:
        tokens.authenticate(state.ledger, token)
    except NotAuthenticatedError:
        state.tokens.forget(token)
        raise


def _parse(document: Any, header_key: str | None = None) -> SubmitBody:
    if not isinstance(document, dict):
        raise invalid_input("The body must be a JSON object with tool and args.")
    if header_key is not None:
        # The header's key is the body's field by another way in: the same rules (validated
        # as the field is); both given, they must agree.
        given = document.get("idempotency_key")
        if given is not None and given != header_key:
            raise invalid_input(
                "The Idempotency-Key header and the body's idempotency_key differ.",
                fix="send the key once (header or body), or the same key in both",
            )
        document = {**document, "idempotency_key": header_key}
    try:
        return SubmitBody.model_validate(document)
    except ValidationError as exc:
        raise validation_problem(exc.errors(include_input=False, include_url=False)) from None


def answer(view: JobView) -> Response:
    """The decision's answer; a replay gives the same one (same status, same job_id)."""
    if view.accepted:
        parked = view.approval is not None  # waits for a person first (docs/approvals.md)
        body = {
            "job_id": view.job_id,
            "status": (Status.AWAITING_APPROVAL if parked else Status.QUEUED).value,
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

"""Agents read outcomes: one job (optionally long-polled), its events, and changes since a
cursor. Another account's job is indistinguishable from a job that does not exist."""

from __future__ import annotations

import asyncio
import uuid
from typing import Annotated, Any

from fastapi import APIRouter, Path, Query
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import Response

from api.auth import Principal, account_scope, may_see, token_of
from api.models import MAX_POSITION, JobEvents, JobPage
from api.openapi import problems
from api.pages import json_response, page
from api.problems import job_not_found, unauthorized
from api.state import ApiState, state_of
from ledger.events import RecordedEvent, job_stream
from ledger.job_view import JobEnvelope, JobView, envelope
from ledger.persistence.audit_queries import fetch_job, one_statement, token_and_job
from ledger.persistence.jobs import list_jobs
from ledger.scrub import public_event_data
from ledger.token_view import TokenView

router = APIRouter(tags=["jobs"])

MAX_WAIT_S = 60.0
OPERATOR_ROLES = ("operator", "auditor")  # they may read raw failure detail; agents may not

JobId = Annotated[
    str,
    Path(
        description="The job's UUID, as returned by POST /v1/jobs",
        json_schema_extra={"format": "uuid"},
    ),
]


def job_key(job_id: str) -> str | None:
    """The canonical id, or None for a string that cannot be a job id (answered as unknown)."""
    try:
        return str(uuid.UUID(job_id))
    except ValueError:
        return None


@router.get(
    "/v1/jobs/{job_id}",
    response_model=JobEnvelope,
    summary="A job's outcome envelope; with ?wait=S, long-poll until it changes",
    responses=problems(401, 404, 422, 503),
    openapi_extra={"security": [{"bearer": []}]},
)
async def read_job(
    request: Request,
    job_id: JobId,
    wait: Annotated[
        float,
        Query(ge=0, le=MAX_WAIT_S, description="Seconds to wait for a change or an outcome"),
    ] = 0,
) -> Response:
    token = token_of(request)
    state = state_of(request)
    key = job_key(job_id)
    if wait <= 0 or key is None:
        view = await run_in_threadpool(_visible_job, state, token, key)
        return _envelope(view)
    await state.waiter.ensure_started()
    # Watch first, read second: a change committed in between still wakes this request.
    with state.waiter.watch(key) as watch:
        view = await run_in_threadpool(_visible_job, state, token, key)
        first = view.status
        deadline = asyncio.get_running_loop().time() + wait
        while not view.terminal and view.status == first:
            remaining = deadline - asyncio.get_running_loop().time()
            watch.known_position = view.ledger_position
            if remaining <= 0 or not await watch.changed(remaining):
                break
            fresh = await run_in_threadpool(fetch_job, state.store, key)
            view = fresh or view
    return _envelope(view)


def _visible_job(state: ApiState, token: str, key: str | None) -> JobView:
    """Authenticate and read in one connection: the agents' hottest path."""
    with one_statement(state.store) as conn:
        caller, view = token_and_job(conn, token, key or "")
    if caller is None:
        raise unauthorized()
    if view is None or not may_see(caller, view.account):
        raise job_not_found()
    return view


def _envelope(view: JobView) -> Response:
    return Response(envelope(view).model_dump_json(), media_type="application/json")


@router.get(
    "/v1/jobs/{job_id}/events",
    response_model=JobEvents,
    summary="The job's events, oldest first",
    responses=problems(401, 404, 503),
)
def read_job_events(request: Request, job_id: JobId, caller: Principal) -> Response:
    key = job_key(job_id)
    recorded = state_of(request).store.read_stream(job_stream(key)) if key else []
    if not recorded or not may_see(caller, str(recorded[0].data.get("account"))):
        raise job_not_found()
    items = [_event(event, caller) for event in recorded]
    return json_response({"job_id": key, "events": items})


def _event(event: RecordedEvent, caller: TokenView) -> dict[str, Any]:
    data = public_event_data(event.data)
    if caller.role not in OPERATOR_ROLES:
        data.pop("detail", None)  # raw exception text is for operators and auditors
    return {
        "position": event.position,
        "type": event.type,
        "code": event.code,
        "recorded_at": event.recorded_at,
        "data": data,
    }


@router.get(
    "/v1/jobs",
    response_model=JobPage,
    summary="The caller's account's jobs that changed after the cursor",
    responses=problems(401, 422, 503),
)
def list_changed_jobs(
    request: Request,
    caller: Principal,
    after: Annotated[
        int, Query(ge=0, le=MAX_POSITION, description="Cursor: a ledger_position")
    ] = 0,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
) -> Response:
    store = state_of(request).store
    views = list_jobs(store, account_scope(caller), after, limit + 1)
    items = [envelope(v).model_dump(mode="json") for v in views]
    return json_response(page(items, limit, after, "ledger_position"))

"""Agents read outcomes: one job (optionally long-polled), its events, and changes since a
cursor. Another account's job is indistinguishable from a job that does not exist."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Query
from starlette.requests import Request
from starlette.responses import Response

from api.auth import Principal, token_of
from api.models import JobEvents, JobPage
from api.openapi import problems
from api.pages import json_response, page
from api.state import state_of
from ledger.access import account_scope
from ledger.cursor import CURSOR_PATTERN
from ledger.job_view import JobEnvelope, JobView, envelope
from ledger.runtime.ledger import Ledger
from ledger.runtime.settle import Until, settle
from ledger.runtime.thread_hop import in_thread
from ledger.services import jobs

router = APIRouter(tags=["jobs"])

MAX_WAIT_S = 60.0

JobId = Annotated[
    str,
    Path(
        description="The job's UUID, as returned by POST /v1/jobs",
        json_schema_extra={"format": "uuid"},
    ),
]


@router.get(
    "/v1/jobs/{job_id}",
    response_model=JobEnvelope,
    summary="A job's outcome envelope; ?wait=S long-polls to a change (until=terminal: an end)",
    responses=problems(401, 404, 410, 422, 503),
    openapi_extra={"security": [{"bearer": []}]},
)
async def read_job(
    request: Request,
    job_id: JobId,
    wait: Annotated[
        float,
        Query(ge=0, le=MAX_WAIT_S, description="Seconds to wait for a change or an outcome"),
    ] = 0,
    until: Annotated[
        Until,
        Query(
            description="With wait: `change` answers as soon as the status moves (or the job "
            "ends); `terminal` only at an outcome, so one request per call"
        ),
    ] = "change",
) -> Response:
    token = token_of(request)
    state = state_of(request)
    key = jobs.job_key(job_id)
    reads = state.reads.current()  # Postgres: the reads run on this loop, with no hop
    if wait <= 0 or key is None:
        _, view = await jobs.get_admitted_on_loop(state.ledger, state.tokens, token, job_id, reads)
        return await _envelope(state.ledger, view)
    await state.waiter.ensure_started()
    # Watch first, read second: a change committed in between still wakes this request.
    with state.waiter.watch(key, until_terminal=until == "terminal") as watch:
        caller, view = await jobs.get_admitted_on_loop(
            state.ledger, state.tokens, token, key, reads
        )

        async def read() -> JobView:
            return await jobs.get_on_loop(state.ledger, key, caller, reads)

        view, _ = await settle(watch, view, read, wait, until=until)
    return await _envelope(state.ledger, view)


async def _envelope(ledger: Ledger, view: JobView) -> Response:
    waiting = None if view.terminal else await in_thread(jobs.waiting_of, ledger, view)
    return Response(envelope(view, waiting).model_dump_json(), media_type="application/json")


@router.get(
    "/v1/jobs/{job_id}/events",
    response_model=JobEvents,
    summary="The job's events, oldest first",
    responses=problems(401, 404, 410, 503),
)
def read_job_events(request: Request, job_id: JobId, caller: Principal) -> Response:
    found = jobs.events(state_of(request).ledger, job_id, caller)
    return json_response({"job_id": jobs.job_key(job_id), "events": found})


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
        str | None,
        Query(
            max_length=64,
            pattern=CURSOR_PATTERN,
            description="Cursor: a `next_cursor` this API returned (opaque); none: from the start",
        ),
    ] = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
) -> Response:
    scope = account_scope(caller.account)
    found = jobs.changes(state_of(request).ledger, scope, after, limit + 1)
    items = [envelope(view).model_dump(mode="json") for view, _ in found]
    return json_response(page(items, limit, after, [cursor for _, cursor in found]))

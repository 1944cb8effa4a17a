"""Auditors' (and operators') reads: the event log, filtered and paged, and a job summary.

A token scoped to one account sees only that account's job streams; `*` sees every stream.
Token events keep no secret, but their hashes are blanked too: nothing token-derived leaves.
Operators see every event without its `hash` and `prev_hash` (the hashes cover the stored
arguments, so they would let one test guesses of an argument); auditors see them.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Annotated

from fastapi import APIRouter, Depends, Path, Query
from starlette.requests import Request
from starlette.responses import Response

from api.auth import require
from api.models import ACCOUNT, PRINTABLE, EventPage, Summary
from api.openapi import problems
from api.pages import json_response, page
from api.problems import ApiProblem, invalid_input
from api.state import state_of
from ledger.access import account_scope
from ledger.codes import Code
from ledger.error_info import ErrorInfo
from ledger.errors import JobNotEndedError, JobNotFoundError, TamperedLeafError
from ledger.public import public_event
from ledger.queries import MAX_POSITION, EventFilter, JobSummary
from ledger.services import audit, proofs
from ledger.token_view import TokenView

router = APIRouter(tags=["audit"])
Reader = Annotated[TokenView, Depends(require("auditor", "operator"))]

AccountFilter = Annotated[str | None, Query(max_length=100, pattern=ACCOUNT)]
ToolFilter = Annotated[str | None, Query(max_length=200, pattern=PRINTABLE)]
# Strings, parsed here: FastAPI's datetime would also take "0" (a Unix time) or a bare date.
Since = Annotated[
    str | None, Query(description="Inclusive, RFC 3339", json_schema_extra={"format": "date-time"})
]
Until = Annotated[
    str | None, Query(description="Exclusive, RFC 3339", json_schema_extra={"format": "date-time"})
]
RFC3339 = re.compile(
    r"^([0-9]{4}-[0-9]{2}-[0-9]{2})[Tt]([0-9]{2}:[0-9]{2}):([0-9]{2})(\.[0-9]+)?([Zz]|[+-][0-9]{2}:[0-9]{2})$"
)


@router.get(
    "/v1/audit/events",
    response_model=EventPage,
    summary="Ledger events after a cursor, filtered",
    responses=problems(401, 403, 422, 503),
)
def audit_events(
    request: Request,
    caller: Reader,
    account: AccountFilter = None,
    tool: ToolFilter = None,
    type: Annotated[str | None, Query(max_length=64, pattern=r"^[a-z_.]+$")] = None,
    code: Code | None = None,
    since: Since = None,
    until: Until = None,
    after: Annotated[int, Query(ge=0, le=MAX_POSITION)] = 0,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
) -> Response:
    scope = account_scope(caller.account)
    window = (_utc(since), _utc(until))  # a malformed time is a 422 whatever the scope
    if scope is not None and account not in (None, scope):
        return json_response(page([], limit, after, []))  # never another account's
    where = EventFilter(
        account=scope or account,
        tool=tool,
        type=type,
        code=code.value if code else None,
        since=window[0],
        until=window[1],
        after=after,
        limit=limit + 1,
    )
    found = audit.events(state_of(request).ledger, where)
    # The hashes cover the stored arguments: a guessing oracle for anyone but auditors.
    hashes = caller.role == "auditor"
    items = [public_event(e, hashes=hashes) for e in found]
    return json_response(page(items, limit, after, [e.position for e in found]))


@router.get(
    "/v1/audit/summary",
    response_model=Summary,
    summary="Counts of jobs by status, code, tool and account",
    responses=problems(401, 403, 422, 503),
)
def audit_summary(
    request: Request,
    caller: Reader,
    account: AccountFilter = None,
    tool: ToolFilter = None,
    since: Since = None,
    until: Until = None,
) -> Response:
    scope = account_scope(caller.account)
    window = (_utc(since), _utc(until))  # a malformed time is a 422 whatever the scope
    if scope is not None and account not in (None, scope):
        return json_response(JobSummary(jobs=0).to_json())  # never another account's
    found = audit.summary(state_of(request).ledger, scope or account, tool, *window)
    return json_response(found.to_json())


def _utc(text: str | None) -> datetime | None:
    """An RFC 3339 time as aware UTC; 422 for anything else."""
    if text is None:
        return None
    parts = RFC3339.match(text)
    if parts is None:
        raise invalid_input("Times must be RFC 3339, e.g. 2025-01-31T12:00:00Z.")
    day, minutes, seconds, fraction, offset = parts.groups()
    seconds = min(seconds, "59")  # a leap second is the same moment for a filter
    offset = "+00:00" if offset in ("Z", "z") else offset
    try:
        moment = datetime.fromisoformat(f"{day}T{minutes}:{seconds}{fraction or ''}{offset}")
        return moment.astimezone(UTC)
    except (ValueError, OverflowError):
        raise invalid_input("A time is out of range or not a calendar time.") from None


@router.get(
    "/v1/audit/head",
    summary="The Merkle tree head now (signed when the ledger has a signing key)",
    responses=problems(401, 403, 503),
)
def audit_head(request: Request, caller: Reader) -> Response:
    return json_response(proofs.head(state_of(request).ledger).to_json())


@router.get(
    "/v1/audit/proofs/{job_id}",
    summary="An inclusion receipt of a job's outcome in the current Merkle tree",
    responses=problems(401, 403, 404, 409, 422, 503),
)
def audit_proof(
    request: Request, caller: Reader, job_id: Annotated[str, Path(max_length=100)]
) -> Response:
    ledger = state_of(request).ledger
    scope = account_scope(caller.account)
    if scope is not None:
        view, _ = ledger.store.read_job(job_id)
        if view is None or view.account != scope:
            raise JobNotFoundError(job_id)  # another account's job is no different from none
    try:
        found = proofs.prove(ledger, job_id)
    except JobNotEndedError as exc:
        raise ApiProblem(409, _no_outcome(str(exc), "wait for the job's outcome")) from None
    except TamperedLeafError as exc:
        message = f"{exc} Run `outcomes audit verify`."
        raise ApiProblem(500, _no_outcome(message, "report it to the ledger's operators")) from None
    return json_response(found.receipt)


def _no_outcome(message: str, fix: str) -> ErrorInfo:
    return ErrorInfo(
        code=Code.REFERENCE_UNRESOLVED,
        dependency="ledger",
        operation="prove a job's outcome",
        fix=fix,
        message=message,
    )

"""`GET /v1/brakes`: the brakes that hold now, and how many jobs each keeps waiting.

A token scoped to one account sees the brakes that hold its jobs (global, any tool's, its own
account's) and counts only its own jobs: other accounts' names and queues stay hidden.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends
from starlette.requests import Request
from starlette.responses import Response

from api.auth import account_scope, require
from api.models import Brakes
from api.openapi import problems
from api.pages import json_response
from api.state import state_of
from ledger.brake_view import BrakeView
from ledger.persistence.audit_queries import waiting_jobs
from ledger.persistence.brakes import active_brakes
from ledger.token_view import TokenView

router = APIRouter(tags=["brakes"])


@router.get(
    "/v1/brakes",
    response_model=Brakes,
    summary="Brakes that hold now (operators and auditors)",
    responses=problems(401, 403, 503),
)
def list_brakes(
    request: Request,
    caller: Annotated[TokenView, Depends(require("operator", "auditor"))],
) -> Response:
    scope = account_scope(caller)
    with state_of(request).store.reading() as conn:
        held = [b for b in active_brakes(conn) if _concerns(b, scope)]
        items = [
            {
                "brake_id": b.brake_id,
                "scope": b.scope,
                "reason": b.reason,
                "operator": b.operator,
                "pulled_at": b.pulled_at,
                "queued_jobs": waiting_jobs(conn, b.scope, scope),
            }
            for b in held
        ]
    return json_response({"brakes": items})


def _concerns(brake: BrakeView, account: str | None) -> bool:
    if account is None or not brake.scope.startswith("account:"):
        return True
    return brake.scope == f"account:{account}"

"""`GET /v1/brakes`: the brakes that hold now, and how many jobs each keeps waiting (a token
scoped to one account sees only what concerns that account: `brakes.holds`)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends
from starlette.requests import Request
from starlette.responses import Response

from api.auth import require
from api.models import Brakes
from api.openapi import problems
from api.pages import json_response
from api.state import state_of
from ledger.access import account_scope
from ledger.services import brakes
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
    holds = brakes.holds(state_of(request).ledger, account_scope(caller.account))
    return json_response({"brakes": [hold.to_json() for hold in holds]})

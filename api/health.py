"""Liveness (the process answers) and readiness (the ledger's database answers, with a schema
this code can use: `ledger.services.admin.ready`, O(1) at any ledger size). Both are
unauthenticated, so they say up or not, ready or not, and nothing about the ledger."""

from __future__ import annotations

from fastapi import APIRouter
from starlette.requests import Request
from starlette.responses import Response

from api.models import Health, Ready
from api.openapi import problems
from api.pages import json_response
from api.problems import unavailable
from api.state import state_of
from ledger.errors import LedgerError
from ledger.services import admin

router = APIRouter(tags=["health"])


@router.get("/healthz", response_model=Health, summary="The process is up")
async def healthz() -> Response:
    return json_response({"status": "ok"})


@router.get(
    "/readyz",
    response_model=Ready,
    summary="The ledger's database answers",
    responses=problems(503),
)
def readyz(request: Request) -> Response:
    try:
        admin.ready(state_of(request).ledger)
    except LedgerError:
        raise unavailable() from None
    return json_response({"status": "ready"})

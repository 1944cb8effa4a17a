"""`GET /metrics`: Prometheus's text format (docs/operations.md). The ledger's counts are
ledger-wide, every account's, so only deployment-wide (`*`) operator and auditor tokens may
read them, unless OUTCOMES_METRICS_OPEN=1 opens the route (a scraper on a private network)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter
from starlette.requests import Request
from starlette.responses import Response

from api.auth import Scheme, authenticate
from api.openapi import problems
from api.problems import forbidden
from api.state import state_of
from ledger.access import account_scope
from observability import exposition
from observability.metrics import install

router = APIRouter(tags=["operations"])
READERS = ("operator", "auditor")
TEXT: dict[int | str, Any] = {
    200: {
        "description": "Prometheus text exposition format",
        "content": {kind: {"schema": {"type": "string"}} for kind in exposition.CONTENT_TYPES},
    }
}

install()  # this process's latencies (decisions, and outcomes when a worker runs in it)


@router.get(
    "/metrics",
    summary="Metrics for Prometheus (deployment-wide operators and auditors)",
    response_class=Response,
    responses=TEXT | problems(401, 403, 503),
)
def metrics(request: Request, _scheme: Scheme) -> Response:
    state = state_of(request)
    ledger = state.ledger
    if not state.settings.metrics_open:
        caller = authenticate(request)
        if caller.role not in READERS or account_scope(caller.account) is not None:
            raise forbidden(
                "role:operator|auditor, account:*",
                "Metrics count every account's jobs: use an operator or auditor token of '*'.",
            )
    body, content_type = exposition.scrape(ledger, request.headers.get("accept", ""))
    return Response(body, media_type=content_type)

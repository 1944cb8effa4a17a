"""What the routes share, hung on `app.state` by `create_app` (no module-level globals, so two
apps in one process, as in the tests, never see each other's ledger)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import cast

from starlette.requests import Request

from api.waiter import JobWaiter
from ledger.dispatch import Dispatcher
from ledger.services.ledger import Ledger


@dataclass(frozen=True)
class ApiState:
    ledger: Ledger
    dispatcher: Dispatcher | None
    waiter: JobWaiter


def state_of(request: Request) -> ApiState:
    return cast(ApiState, request.app.state.ledger)

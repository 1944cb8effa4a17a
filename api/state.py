"""What the routes share, hung on `app.state` by `create_app` (no module-level globals, so two
apps in one process, as in the tests, never see each other's ledger)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import cast

from starlette.requests import Request

from api.waiter import JobWaiter
from ledger.persistence.store import EventStore
from ledger.persistence.submit import Dispatcher


@dataclass(frozen=True)
class ApiState:
    store: EventStore
    dispatcher: Dispatcher | None
    waiter: JobWaiter


def state_of(request: Request) -> ApiState:
    return cast(ApiState, request.app.state.ledger)

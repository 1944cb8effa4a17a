"""What the routes share, hung on `app.state` by `create_app` (no module-level globals, so two
apps in one process, as in the tests, never see each other's ledger)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import cast

from starlette.requests import Request

from api.waiter import JobWaiter
from ledger.runtime.ledger import Ledger
from ledger.runtime.loop_reads import LoopReadsHolder
from ledger.runtime.outbox import Outbox
from ledger.services.tokens import AdmittedTokens
from ledger.settings import Settings


@dataclass(frozen=True)
class ApiState:
    ledger: Ledger
    outbox: Outbox | None  # None: decisions only; the reconciler's relay publishes them
    waiter: JobWaiter
    tokens: AdmittedTokens  # for submits, whose decision re-checks the token as it is written
    settings: Settings  # read once, when the app was made
    reads: LoopReadsHolder  # the GET's job reads on the loop (Postgres), without a hop


def state_of(request: Request) -> ApiState:
    return cast(ApiState, request.app.state.api)

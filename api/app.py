"""The agents' HTTP API (contract §6): `create_app()` builds it around a ledger and a dispatcher."""

from __future__ import annotations

import logging
import threading
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import Depends, FastAPI
from starlette.concurrency import run_in_threadpool
from starlette.routing import Route
from starlette.types import Receive, Scope, Send

from api import (
    approvals,
    audit,
    brakes,
    catalog,
    docs,
    handlers,
    health,
    jobs_cancel,
    jobs_read,
    jobs_submit,
    metrics,
    root,
    turns,
    webhooks,
)
from api.fast_path import FastPath, fast_endpoint
from api.limits import MAX_BODY_BYTES, BodyLimitMiddleware
from api.openapi import build_openapi
from api.queries import refuse_unknown_query
from api.state import ApiState
from api.waiter import JobWaiter
from console.web import mount as mount_console
from ledger.dispatch import Dispatcher
from ledger.heap import freeze_startup_heap
from ledger.runtime.ledger import Ledger, open_ledger
from ledger.runtime.loop_reads import LoopReadsHolder
from ledger.runtime.outbox import Outbox
from ledger.services import admin
from ledger.services.tokens import AdmittedTokens
from ledger.settings import Settings, load_settings
from ledger.tools import load_tool_modules
from mcp_server.http import PATH as MCP_PATH
from mcp_server.http import McpHttp

log = logging.getLogger(__name__)
ROLE_CHECK = "outcomes-role-check"  # the thread that warns about a too powerful database role

DESCRIPTION = (
    "Agents submit tool jobs and read their outcomes; auditors and operators read the ledger. "
    "Every error is application/problem+json with the outcome envelope's `error` object."
)


class LedgerApi(FastAPI):
    """FastAPI, with the agents' two hottest routes taken before its stack (api.fast_path)."""

    fast_path: FastPath | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and self.fast_path is not None:
            endpoint = fast_endpoint(scope)
            if endpoint is not None:
                await self.fast_path(scope, receive, send, endpoint)
                return
        await super().__call__(scope, receive, send)


def create_app(
    ledger: Ledger | None,
    dispatcher: Dispatcher | None,
    *,
    settings: Settings | None = None,
    max_body_bytes: int = MAX_BODY_BYTES,
) -> LedgerApi:
    """The API over `ledger` (None: the ledger named by OUTCOMES_DATABASE_URL), handing
    accepted jobs to `dispatcher` through the process's outbox (whoever starts the API passes
    it: `outcomes serve` gives Celery's; None records decisions only, and the reconciler's
    relay publishes them). The process's settings are read once, here (unless given), and
    every route takes them from the app's state."""
    settings = settings or load_settings()
    load_tool_modules(settings.tools)  # the tools' registry decides what is accepted
    owned = ledger is None  # opened here, so closed here
    opened = ledger if ledger is not None else open_ledger(settings.database_url)
    # The process's outbox: submits hand it the job and answer at once; it publishes, and
    # records what the broker confirmed (ledger.runtime.outbox).
    outbox = Outbox(opened, dispatcher) if dispatcher is not None else None
    state = ApiState(
        ledger=opened,
        outbox=outbox,
        waiter=JobWaiter(opened),
        tokens=AdmittedTokens(opened),
        settings=settings,
        reads=LoopReadsHolder(opened),
    )
    mcp = McpHttp(  # MCP tool calls wait on the same waiter
        opened,
        outbox,
        state.waiter,
        allowed_origins=settings.allowed_origins,
        allowed_hosts=settings.allowed_hosts,
    )

    @asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        await state.waiter.ensure_started()
        freeze_startup_heap()  # started: what exists now lives as long as the process
        # On a thread of its own: startup never waits on a database that is slow to answer.
        threading.Thread(
            target=_warn_if_privileged, args=(opened,), name=ROLE_CHECK, daemon=True
        ).start()
        try:
            async with mcp.running():
                yield
        finally:
            await state.waiter.stop()
            await state.reads.close()
            if outbox is not None:
                await run_in_threadpool(outbox.close)
            if owned:
                opened.close()

    app = LedgerApi(
        title="Outcome Ledger",
        version="1.0.0",
        description=DESCRIPTION,
        lifespan=lifespan,
        docs_url=None,  # ours, from the package: api/docs.py
        redoc_url=None,
        # No redirects: Starlette's would build the Location from the Host header.
        redirect_slashes=False,
    )
    app.state.api = state
    # The /v1 routes refuse a query parameter they do not take (api.queries).
    strict = [Depends(refuse_unknown_query)]
    for module in (jobs_submit, jobs_read, catalog, audit, brakes, webhooks):
        app.include_router(module.router, dependencies=strict)
    for module in (health, metrics, root):
        app.include_router(module.router)
    # POST /v1/jobs/{id}/cancel (docs/cancel.md)
    app.include_router(jobs_cancel.router, dependencies=strict)
    # GET /v1/approvals, POST /v1/jobs/{id}/approve|deny (docs/approvals.md)
    app.include_router(approvals.router, dependencies=strict)
    # GET /v1/turns/{id}, DELETE /v1/turns/{id}/halt (docs/turns.md)
    app.include_router(turns.router, dependencies=strict)
    docs.install(app)
    # POST only: stateless, so no standalone event stream (GET) and no session to end
    # (DELETE); both are 405, which the transport allows (mcp_server/http.py).
    app.router.routes.append(Route(MCP_PATH, mcp, methods=["POST"], include_in_schema=False))
    mount_console(app, opened, settings, outbox)  # the console at /console, same ledger
    handlers.install(app)
    app.add_middleware(BodyLimitMiddleware, max_bytes=max_body_bytes)
    app.fast_path = FastPath(app, max_body_bytes)
    app.openapi = lambda: build_openapi(app)  # type: ignore[method-assign]
    return app


def _warn_if_privileged(ledger: Ledger) -> None:
    if warning := admin.privilege_warning(ledger):
        log.warning("%s", warning)

"""Streamable HTTP at `/mcp`, mounted by the API: the bearer token is checked on every HTTP
request exactly as for `/v1` (`ledger.services.tokens.authenticate`), before the SDK sees it.

Stateless: each POST is served on its own, so any API process behind a load balancer answers
any call (a stateful session would live in one process's memory). Progress notifications still
reach the client, on the POST's own event stream.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any

import anyio.to_thread
import orjson
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from starlette.types import Receive, Scope, Send

from ledger.codes import Code
from ledger.dispatch import Dispatcher
from ledger.error_info import ErrorInfo
from ledger.errors import NotAuthenticatedError
from ledger.services import tokens
from ledger.services.ledger import Ledger
from ledger.token_view import TokenView
from mcp_server.server import NOT_AUTHENTICATED, Context, LedgerMcp
from mcp_server.watch import Watcher

PATH = "/mcp"
TOKEN_KEY = "outcomes.token"  # the authenticated TokenView, in the request's ASGI scope
UNAUTHENTICATED = -32001  # a server-defined JSON-RPC error code (the range JSON-RPC leaves free)


class McpHttp:
    """The ASGI app to mount, and `running()` for the host app's lifespan."""

    def __init__(self, ledger: Ledger, dispatcher: Dispatcher | None, watcher: Watcher) -> None:
        self._ledger = ledger
        self._server = LedgerMcp(ledger, dispatcher, watcher, _identify).build()
        self._sessions: StreamableHTTPSessionManager | None = None

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        # A manager runs once: a new one for each run of the host app (tests start apps again).
        # No DNS-rebinding host check: the credential is a bearer token that a browser never
        # adds by itself, and the API's own routes do not check Host either.
        sessions = StreamableHTTPSessionManager(app=self._server, stateless=True)
        async with sessions.run():
            self._sessions = sessions
            try:
                yield
            finally:
                self._sessions = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            try:
                view = await anyio.to_thread.run_sync(_authenticate, self._ledger, scope)
            except NotAuthenticatedError:
                await _unauthorized(send)
                return
            scope = {**scope, TOKEN_KEY: view}
        if self._sessions is None:
            raise RuntimeError("the MCP endpoint is served only while the app runs")
        await self._sessions.handle_request(scope, receive, send)


def _authenticate(ledger: Ledger, scope: Scope) -> TokenView:
    header = next((v for k, v in scope["headers"] if k == b"authorization"), b"")
    kind, _, token = header.decode("latin-1").partition(" ")
    if kind.lower() != "bearer" or not token.strip():
        raise NotAuthenticatedError()
    return tokens.authenticate(ledger, token.strip())


async def _identify(ctx: Context) -> TokenView:
    request: Any = ctx.request
    view = request.scope.get(TOKEN_KEY) if request is not None else None
    if not isinstance(view, TokenView):
        raise NotAuthenticatedError()
    return view


async def _unauthorized(send: Send) -> None:
    """401 as a JSON-RPC error, which MCP clients show as is, with the envelope's error."""
    error = ErrorInfo(
        code=Code.ACCESS_DENIED,
        operation="authenticate",
        fix="send Authorization: Bearer <token> (outcomes tokens create --role agent)",
        message=NOT_AUTHENTICATED,
    )
    body = orjson.dumps(
        {
            "jsonrpc": "2.0",
            "id": None,
            "error": {
                "code": UNAUTHENTICATED,
                "message": NOT_AUTHENTICATED,
                "data": {"error": error.model_dump(mode="json")},
            },
        }
    )
    headers = [
        (b"content-type", b"application/json"),
        (b"www-authenticate", b'Bearer realm="outcome-ledger"'),
        (b"content-length", str(len(body)).encode()),
    ]
    await send({"type": "http.response.start", "status": 401, "headers": headers})
    await send({"type": "http.response.body", "body": body})

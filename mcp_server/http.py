"""Streamable HTTP at `/mcp`, mounted by the API: the bearer token is checked on every HTTP
request exactly as for `/v1` (`ledger.services.tokens.authenticate`), before the SDK sees it.

Stateless: each POST is served on its own, so any API process behind a load balancer answers
any call (a stateful session would live in one process's memory). Progress notifications still
reach the client, on the POST's own event stream. So the endpoint is POST only: a GET (the
standalone event stream) and a DELETE (ending a session) are answered 405 by the host app's
router, as the transport allows a server that offers neither; no stream is left open.

Before the token, the request's origin (ledger.web_origins; MCP's transport: servers MUST
validate `Origin`): a browser page of another origin is refused 403, a request naming a
`Host` this server does not answer under (DNS rebinding) 421. A request without `Origin` (a
non-browser client) passes.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any

import anyio.to_thread
import orjson
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from starlette.types import Receive, Scope, Send

from ledger.bearer import bearer_challenge
from ledger.codes import Code
from ledger.dispatch import Dispatcher
from ledger.error_info import ErrorInfo
from ledger.errors import NotAuthenticatedError
from ledger.runtime.ledger import Ledger
from ledger.runtime.outbox import Outbox
from ledger.services import tokens
from ledger.token_view import TokenView
from ledger.web_origins import host_allowed, is_loopback_address, origin_allowed
from mcp_server.server import NOT_AUTHENTICATED, Context, LedgerMcp
from mcp_server.watch import Watcher

PATH = "/mcp"
TOKEN_KEY = "outcomes.token"  # the authenticated TokenView, in the request's ASGI scope
UNAUTHENTICATED = -32001  # a server-defined JSON-RPC error code (the range JSON-RPC leaves free)
INVALID_REQUEST = -32600  # JSON-RPC's own: the request is refused before it is read


class McpHttp:
    """The ASGI app to mount, and `running()` for the host app's lifespan."""

    def __init__(
        self,
        ledger: Ledger,
        dispatcher: Dispatcher | Outbox | None,
        watcher: Watcher,
        *,
        allowed_origins: frozenset[str] = frozenset(),
        allowed_hosts: frozenset[str] = frozenset(),
    ) -> None:
        self._ledger = ledger
        self._server = LedgerMcp(ledger, dispatcher, watcher, _identify).build()
        self._sessions: StreamableHTTPSessionManager | None = None
        self._origins = allowed_origins  # OUTCOMES_ALLOWED_ORIGINS
        self._hosts = allowed_hosts  # OUTCOMES_ALLOWED_HOSTS

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        # A manager runs once: a new one for each run of the host app (tests start apps again).
        # Origin and Host are checked here, before the SDK (its own check knows no same-origin
        # rule and no loopback connection), so the SDK's is left off.
        sessions = StreamableHTTPSessionManager(app=self._server, stateless=True)
        async with sessions.run():
            self._sessions = sessions
            try:
                yield
            finally:
                self._sessions = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            if refusal := self._refusal(scope):
                await _refuse(send, *refusal)
                return
            try:
                view = await anyio.to_thread.run_sync(_authenticate, self._ledger, scope)
            except NotAuthenticatedError as exc:
                await _unauthorized(send, exc.presented)
                return
            scope = {**scope, TOKEN_KEY: view}
        if self._sessions is None:
            raise RuntimeError("the MCP endpoint is served only while the app runs")
        await self._sessions.handle_request(scope, receive, send)

    def _refusal(self, scope: Scope) -> tuple[int, ErrorInfo] | None:
        """Why a request may not reach the MCP server (Host, then Origin), or None."""
        host = _header(scope, b"host")
        server = scope.get("server")
        on_loopback = is_loopback_address(server[0] if server else None)
        if not host_allowed(host, self._hosts, on_loopback):
            return 421, ErrorInfo(
                code=Code.ACCESS_DENIED,
                operation="route the request",
                required_capability="a Host this server answers under",
                fix="reach the server by one of its names; an operator lists them in "
                "OUTCOMES_ALLOWED_HOSTS",
                message="This server does not answer MCP under that Host name.",
            )
        origin = _header(scope, b"origin")
        scheme = str(scope.get("scheme", "http"))
        if origin is not None and not origin_allowed(
            origin, host, scheme, self._origins, loopback=True
        ):
            return 403, ErrorInfo(
                code=Code.ACCESS_DENIED,
                operation="accept a browser page's request",
                required_capability="a page of an allowed origin",
                fix="call from this server's own origin, a loopback page, or an origin an "
                "operator lists in OUTCOMES_ALLOWED_ORIGINS",
                message="Requests from pages of this origin are not accepted.",
            )
        return None


def _header(scope: Scope, name: bytes) -> str | None:
    return next((v.decode("latin-1") for k, v in scope["headers"] if k == name), None)


def _authenticate(ledger: Ledger, scope: Scope) -> TokenView:
    header = next((v for k, v in scope["headers"] if k == b"authorization"), b"")
    kind, _, token = header.decode("latin-1").partition(" ")
    if kind.lower() != "bearer" or not token.strip():
        raise NotAuthenticatedError(presented=False)
    return tokens.authenticate(ledger, token.strip())


async def _identify(ctx: Context) -> TokenView:
    request: Any = ctx.request
    view = request.scope.get(TOKEN_KEY) if request is not None else None
    if not isinstance(view, TokenView):
        raise NotAuthenticatedError()
    return view


async def _unauthorized(send: Send, presented: bool) -> None:
    """401 as a JSON-RPC error, which MCP clients show as is, with the envelope's error. A
    token presented and refused is `error="invalid_token"` (RFC 6750): a client stops there
    instead of starting OAuth discovery."""
    error = ErrorInfo(
        code=Code.ACCESS_DENIED,
        operation="authenticate",
        fix="send Authorization: Bearer <token> (outcomes tokens create --role agent)",
        message=NOT_AUTHENTICATED,
    )
    challenge = bearer_challenge(presented, realm="outcome-ledger").encode("latin-1")
    await _refuse(send, 401, error, UNAUTHENTICATED, [(b"www-authenticate", challenge)])


async def _refuse(
    send: Send,
    status: int,
    error: ErrorInfo,
    rpc_code: int = INVALID_REQUEST,
    extra: list[tuple[bytes, bytes]] | None = None,
) -> None:
    """An HTTP refusal as a JSON-RPC error (no id: the request was not read), carrying the
    envelope's error so the client shows the code and the fix."""
    body = orjson.dumps(
        {
            "jsonrpc": "2.0",
            "id": None,
            "error": {
                "code": rpc_code,
                "message": error.message,
                "data": {"error": error.model_dump(mode="json")},
            },
        }
    )
    headers = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(body)).encode()),
        *(extra or []),
    ]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})

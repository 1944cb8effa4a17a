"""`outcomes mcp`: the MCP server over stdin/stdout for one token (a desktop MCP client starts
it as a subprocess). The token is checked at start, so a missing or wrong one fails at once
with a clear reason, and again on every request, so revoking it takes effect mid-session."""

from __future__ import annotations

import anyio
import anyio.to_thread
from mcp.server.stdio import stdio_server

from ledger.dispatch import Dispatcher
from ledger.runtime.ledger import Ledger
from ledger.runtime.outbox import Outbox
from ledger.services import tokens
from ledger.token_view import TokenView
from mcp_server.server import Context, LedgerMcp
from mcp_server.watch import PollingWatcher


def check_token(ledger: Ledger, token: str) -> TokenView:
    """The token's view; NotAuthenticatedError when it is not a valid token."""
    return tokens.authenticate(ledger, token)


def serve_stdio(ledger: Ledger, dispatcher: Dispatcher | Outbox | None, token: str) -> None:
    async def identify(_ctx: Context) -> TokenView:
        return await anyio.to_thread.run_sync(tokens.authenticate, ledger, token)

    # The session's own outbox over a bare dispatcher: calls answer without waiting for the
    # broker's confirmation, and the outbox publishes (again, while the broker is away).
    sender: Dispatcher | Outbox | None = dispatcher
    own = dispatcher is not None and not isinstance(dispatcher, Outbox)
    if dispatcher is not None and not isinstance(dispatcher, Outbox):
        sender = Outbox(ledger, dispatcher)
    server = LedgerMcp(ledger, sender, PollingWatcher(ledger), identify).build()

    async def run() -> None:
        async with stdio_server() as (read, write):
            await server.run(read, write, server.create_initialization_options())

    try:
        anyio.run(run)
    finally:
        if own and isinstance(sender, Outbox):
            sender.close()

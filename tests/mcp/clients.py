"""MCP clients from the SDK against a served ledger: over stdio (`outcomes mcp` spawned as a
subprocess by `mcp.client.stdio`) or streamable HTTP (`/mcp` of `outcomes serve`)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import IO

import httpx2
from mcp.client import Client
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client

from tests.mcp.serving import Served

TRANSPORTS = ["stdio", "http"]


def stdio_params(served: Served, token: str | None) -> StdioServerParameters:
    env = dict(served.env)
    if token is not None:
        env["OUTCOMES_TOKEN"] = token
    argv = served.mcp_argv()
    return StdioServerParameters(command=argv[0], args=argv[1:], env=env, cwd=served.home)


@asynccontextmanager
async def connect(
    served: Served, transport: str, token: str | None, errlog: IO[str] | None = None
) -> AsyncIterator[ClientSession]:
    if transport == "stdio":
        params = stdio_params(served, token)
        async with (
            stdio_client(params, **({"errlog": errlog} if errlog else {})) as (read, write),
            ClientSession(read, write) as session,
        ):
            await session.initialize()
            yield session
        return
    headers = {"Authorization": f"Bearer {token}"} if token is not None else {}
    async with (
        httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(30, read=120)) as http,
        streamable_http_client(served.base_url + "/mcp", http_client=http) as (read, write),
        ClientSession(read, write) as session,
    ):
        await session.initialize()
        yield session


@asynccontextmanager
async def modern_client(served: Served, transport: str, token: str) -> AsyncIterator[Client]:
    """The SDK's high-level `Client` (mode "auto": the current protocol where offered)."""
    if transport == "stdio":
        async with Client(stdio_params(served, token)) as client:
            yield client
        return
    headers = {"Authorization": f"Bearer {token}"}
    async with (
        httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(30, read=120)) as http,
        Client(streamable_http_client(served.base_url + "/mcp", http_client=http)) as client,
    ):
        yield client

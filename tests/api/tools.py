"""Throwaway tools the API tests submit to (registered once per process, on import)."""

from __future__ import annotations

from pydantic import BaseModel

from ledger.outcomes import Succeeded
from ledger.tools import Quota, ToolContext, tool

ECHO = "apitest.echo"
METERED = "apitest.metered"
OFF = "apitest.off"
QUOTA = 2


class EchoArgs(BaseModel):
    text: str
    times: int = 1


@tool(ECHO)
def echo(args: EchoArgs, ctx: ToolContext) -> Succeeded:
    return Succeeded(result={"text": args.text * args.times})


@tool(METERED, quota=Quota(limit=QUOTA, window_s=3600))
def metered(args: EchoArgs, ctx: ToolContext) -> Succeeded:
    return Succeeded(result={"text": args.text})


@tool(OFF, enabled=False)
def off(args: EchoArgs, ctx: ToolContext) -> Succeeded:
    return Succeeded()

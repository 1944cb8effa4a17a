"""The tool `python -m bench.mcp` calls: it does nothing, so a round trip is all ledger."""

from __future__ import annotations

from pydantic import BaseModel

from ledger.outcomes import Succeeded
from ledger.tools import ToolContext, tool

NOOP = "bench.noop"


class NoArgs(BaseModel):
    pass


@tool(NOOP, spends=False, timeout_s=10, max_attempts=1)
def noop(args: NoArgs, ctx: ToolContext) -> Succeeded:
    """Does nothing and succeeds."""
    return Succeeded(result={})

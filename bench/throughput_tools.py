"""The no-op tool of bench.throughput, loaded by `OUTCOMES_TOOLS=bench.throughput_tools`.

It spends nothing and does nothing, so the benchmark measures what the ledger adds around a
tool call: the decision at submit, the claim (brake re-check, `work.started`, lease) and the
recorded outcome.
"""

from __future__ import annotations

from pydantic import BaseModel

from ledger.outcomes import Succeeded
from ledger.tools import ToolContext, tool

NOOP_TOOL = "bench.noop"


class NoopArgs(BaseModel):
    seq: int = 0


@tool(NOOP_TOOL, spends=False, timeout_s=30, max_attempts=1)
def noop(args: NoopArgs, ctx: ToolContext) -> Succeeded:
    """Do nothing and say so."""
    return Succeeded(result={})

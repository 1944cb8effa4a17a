"""The tool of bench.fairness, loaded by `OUTCOMES_TOOLS=bench.fairness_tools`: it takes
50 ms (a short real call), so one account's backlog is felt by the next account's jobs."""

from __future__ import annotations

import time

from pydantic import BaseModel

from ledger.outcomes import Succeeded
from ledger.tools import ToolContext, tool

SLEEP_TOOL = "bench.sleep50"
SLEEP_S = 0.05


class SleepArgs(BaseModel):
    seq: int = 0


@tool(SLEEP_TOOL, spends=False, timeout_s=30, max_attempts=1, start_within_s=3600)
def sleep50(args: SleepArgs, ctx: ToolContext) -> Succeeded:
    """Take 50 ms, as a short call to another service would."""
    time.sleep(SLEEP_S)  # the simulated call
    return Succeeded(result={})

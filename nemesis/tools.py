"""The campaign's tools (loaded by the workers and the API with OUTCOMES_TOOLS=nemesis.tools).
Each writes what it really does to the ground truth (`nemesis.truth`) before it reports.

One of each kind of behaviour the ledger must keep honest: quick, slow with checkpoints,
spending, flaky-retryable, crashing, silent (spends, then reports nothing), declining, partial.
"""

from __future__ import annotations

import time
from typing import Any

from pydantic import BaseModel, Field

from ledger.codes import Code
from ledger.errors import BrakeEngaged
from ledger.outcomes import Declined, Partial, Succeeded, ToolFailure
from ledger.tools import ToolContext, tool
from nemesis import truth

QUICK = "nemesis.quick"
SLOW = "nemesis.slow"
SPEND = "nemesis.spend"
FLAKY = "nemesis.flaky"
CRASH = "nemesis.crash"
SILENT = "nemesis.silent"
DECLINE = "nemesis.decline"
PARTIAL = "nemesis.partial"
SPENDING = frozenset({SPEND, SILENT})


class Args(BaseModel):
    n: int = Field(default=0, ge=0)  # the workload's sequence number (tells jobs apart)
    steps: int = Field(default=4, ge=1, le=50)
    step_s: float = Field(default=0.25, ge=0, le=5)


def _begin(ctx: ToolContext, name: str) -> None:
    truth.record(ctx.job_id, ctx.attempt, name, "begin")


def _done(ctx: ToolContext, name: str, outcome: str) -> None:
    truth.record(ctx.job_id, ctx.attempt, name, "done", outcome=outcome)


@tool(QUICK, max_attempts=3, timeout_s=30)
def quick(args: Args, ctx: ToolContext) -> Succeeded:
    """Answers at once."""
    _begin(ctx, QUICK)
    _done(ctx, QUICK, "succeeded")
    return Succeeded(result={"n": args.n})


@tool(SLOW, max_attempts=2, timeout_s=60)
def slow(args: Args, ctx: ToolContext) -> Succeeded:
    """Long work in steps; re-checks the brake before each one (stops when it is pulled)."""
    _begin(ctx, SLOW)
    for step in range(args.steps):
        checked_at = time.time()  # the brake check's start: the checker's reference
        try:
            ctx.checkpoint()
        except BrakeEngaged:
            _done(ctx, SLOW, "halted")
            raise
        truth.record(ctx.job_id, ctx.attempt, SLOW, "step", step=step, checked_at=checked_at)
        time.sleep(args.step_s)  # simulated work of one step
        ctx.heartbeat()
    _done(ctx, SLOW, "succeeded")
    return Succeeded(result={"steps": args.steps})


@tool(SPEND, spends=True, timeout_s=60)
def spend(args: Args, ctx: ToolContext) -> Succeeded:
    """Spends (at most once per job, whatever happens to workers and brokers)."""
    _begin(ctx, SPEND)
    truth.record(ctx.job_id, ctx.attempt, SPEND, "spend")
    _done(ctx, SPEND, "succeeded")
    return Succeeded(result={"charged": 1})


@tool(FLAKY, max_attempts=3, timeout_s=30)
def flaky(args: Args, ctx: ToolContext) -> Succeeded:
    """Fails retryably on its first attempt (a new fingerprint each time), then succeeds."""
    _begin(ctx, FLAKY)
    if ctx.attempt < 2:
        _done(ctx, FLAKY, "retry")
        raise ToolFailure(
            code=Code.SOURCE_UNRELIABLE,
            dependency="index",
            operation="query",
            retryable=True,
            fingerprint=f"generation-{ctx.attempt}",
            message="The index answered with an error.",
        )
    _done(ctx, FLAKY, "succeeded")
    return Succeeded(result={"attempt": ctx.attempt})


@tool(CRASH, max_attempts=1, timeout_s=30)
def crash(args: Args, ctx: ToolContext) -> Succeeded:
    """Raises an unexpected exception (a bug in the tool)."""
    _begin(ctx, CRASH)
    _done(ctx, CRASH, "crashed")
    raise RuntimeError("the tool's own bug")


@tool(SILENT, spends=True, timeout_s=30)
def silent(args: Args, ctx: ToolContext) -> Any:
    """Spends, then reports nothing: the agent must be told to verify at the source."""
    _begin(ctx, SILENT)
    truth.record(ctx.job_id, ctx.attempt, SILENT, "spend")
    _done(ctx, SILENT, "none")
    return None


@tool(DECLINE, max_attempts=1, timeout_s=30)
def decline(args: Args, ctx: ToolContext) -> Declined:
    """Declines (a polite no is an outcome, not a success)."""
    _begin(ctx, DECLINE)
    _done(ctx, DECLINE, "declined")
    return Declined(reason="the card has a cover already")


@tool(PARTIAL, max_attempts=1, timeout_s=30)
def partial(args: Args, ctx: ToolContext) -> Partial:
    """Does half of what was asked and says so."""
    _begin(ctx, PARTIAL)
    _done(ctx, PARTIAL, "partial")
    return Partial(result={"n": args.n}, processed=1, skipped=["second half"], total=2)

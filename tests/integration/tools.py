"""Test-only tools for the integration suite, loaded by the workers through OUTCOMES_TOOLS.

Every tool that does real work appends one line per call to OUTCOMES_SIDE_EFFECTS_FILE
(`<job id> <attempt> <unix time>`), so a test can count what actually happened, in any process.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from ledger.codes import Code
from ledger.outcomes import Succeeded, ToolFailure
from ledger.tools import Quota, ToolContext, tool

QUOTA_LIMIT = 10


class Charge(BaseModel):
    amount: int = 1
    delay_s: float = Field(default=0.0, ge=0, le=5)


@tool("itest.charge", spends=True, timeout_s=30)
def charge(args: Charge, ctx: ToolContext) -> Succeeded:
    """A spending tool; optionally slow (it sleeps `delay_s` before charging)."""
    if args.delay_s:
        time.sleep(args.delay_s)  # simulated work
    record_call(ctx)
    return Succeeded(result={"charged": args.amount})


@tool("itest.charge_flaky", spends=True, timeout_s=30, max_attempts=3)
def charge_flaky(args: Charge, ctx: ToolContext) -> Succeeded:
    """Charges, then fails retryably: a spending tool must not be retried all the same."""
    record_call(ctx)
    raise ToolFailure(
        code=Code.SOURCE_UNRELIABLE,
        dependency="billing",
        operation="confirm the charge",
        retryable=True,
        fingerprint=f"billing-v{ctx.attempt}",
        message="The billing provider did not confirm the charge.",
    )


class Probe(BaseModel):
    note: str = ""


@tool("itest.flaky_changing", spends=False, timeout_s=30, max_attempts=3)
def flaky_changing(args: Probe, ctx: ToolContext) -> Succeeded:
    """Fails retryably with a new fingerprint each attempt: retried up to max_attempts."""
    record_call(ctx)
    raise ToolFailure(
        code=Code.SOURCE_UNRELIABLE,
        dependency="search",
        operation="query the index",
        retryable=True,
        fingerprint=f"index-generation-{ctx.attempt}",
        message="The search index answered with an error.",
    )


@tool("itest.flaky_same", spends=False, timeout_s=30, max_attempts=5)
def flaky_same(args: Probe, ctx: ToolContext) -> Succeeded:
    """Fails retryably with the same fingerprint each time: retrying stops after 2 attempts."""
    record_call(ctx)
    raise ToolFailure(
        code=Code.SOURCE_UNRELIABLE,
        dependency="search",
        operation="query the index",
        retryable=True,
        fingerprint="index-config-v1",
        message="The search index answered with an error.",
    )


@tool("itest.spend_nothing", spends=True, timeout_s=10)
def spend_nothing(args: Probe, ctx: ToolContext) -> Any:
    """Spends, then reports nothing: the agent must verify at the source."""
    record_call(ctx)
    return None


@tool("itest.quota_ten", spends=True, timeout_s=10, quota=Quota(limit=QUOTA_LIMIT, window_s=3600))
def quota_ten(args: Probe, ctx: ToolContext) -> Succeeded:
    """At most ten accepted jobs per account per hour."""
    record_call(ctx)
    return Succeeded(result={})


def record_call(ctx: ToolContext) -> None:
    """One line per real effect; a single short append is atomic across processes."""
    path = os.environ.get("OUTCOMES_SIDE_EFFECTS_FILE")
    if path:
        with Path(path).open("a") as out:
            out.write(f"{ctx.job_id} {ctx.attempt} {time.time():.6f}\n")

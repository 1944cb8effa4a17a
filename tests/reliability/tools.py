"""Test-only tools for the worker-loss and redelivery scenarios, loaded by the workers through
OUTCOMES_TOOLS (see `tests.reliability.conftest.Rig`).

Each call appends `<job id> <attempt> <unix time> <pid>` to OUTCOMES_SIDE_EFFECTS_FILE before
doing anything else, so a test can count real effects and find the process that runs the tool.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

from pydantic import BaseModel, Field

from ledger.outcomes import Succeeded
from ledger.tools import ToolContext, tool

POISON_MAX_ATTEMPTS = 3


class SlowCharge(BaseModel):
    seconds: float = Field(default=0.0, ge=0, le=60)
    amount: int = 1


@tool("rtest.slow_charge", spends=True, timeout_s=60)
def slow_charge(args: SlowCharge, ctx: ToolContext) -> Succeeded:
    """Spends first (the side effect is written), then works for `seconds`."""
    record_effect(ctx)
    time.sleep(args.seconds)  # simulated work after the money is gone
    return Succeeded(result={"charged": args.amount, "pid": os.getpid()})


class SlowProbe(BaseModel):
    seconds: float = Field(default=0.0, ge=0, le=20)


@tool("rtest.slow_probe", spends=False, timeout_s=30, max_attempts=2)
def slow_probe(args: SlowProbe, ctx: ToolContext) -> Succeeded:
    """A slow read (no spending): a lost attempt may be followed by the next one."""
    record_effect(ctx)
    time.sleep(args.seconds)  # simulated work
    return Succeeded(result={"attempt": ctx.attempt, "pid": os.getpid()})


class Poison(BaseModel):
    note: str = ""


@tool("rtest.poison", spends=False, timeout_s=30, max_attempts=POISON_MAX_ATTEMPTS)
def poison(args: Poison, ctx: ToolContext) -> Succeeded:
    """Kills the process that runs it, on every attempt (a segfaulting native library)."""
    record_effect(ctx)
    os.kill(os.getpid(), signal.SIGKILL)
    return Succeeded(result={})  # never reached


def record_effect(ctx: ToolContext) -> None:
    """One short line per call: a single small append is atomic across processes."""
    path = os.environ.get("OUTCOMES_SIDE_EFFECTS_FILE")
    if path:
        with Path(path).open("a") as out:
            out.write(f"{ctx.job_id} {ctx.attempt} {time.time():.6f} {os.getpid()}\n")

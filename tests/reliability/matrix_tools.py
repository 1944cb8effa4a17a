"""Tools for the reliability matrix, loaded by the workers through OUTCOMES_TOOLS.

Two files record what really happened, from any process:
- OUTCOMES_SIDE_EFFECTS_FILE: one line per real-world effect of a tool (`<job id> <attempt>
  <unix time>`), the file the checker's `over_effects` counter reads;
- MATRIX_MARKS_FILE: progress marks (`<job id> <mark> <unix time>`): a tool entered, passed a
  step, left a gate. Marks are not effects.

A gate is a file path in the tool's arguments: the tool waits until the file exists. Tests open
gates to make a tool finish at a chosen moment (while Postgres is down, after a brake pull).
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from ledger.execution import BrakeEngaged
from ledger.outcomes import Partial, Succeeded
from ledger.tools import Quota, ToolContext, tool

MARKS_ENV = "MATRIX_MARKS_FILE"
# Test harness knob (see test_matrix_brokers): kombu's Redis transport sweeps for messages past
# their visibility timeout only every `unacked_restore_interval * unacked_restore_throttle`
# seconds (10 x 10 by default in the prefork event loop). The scenario needs the sweep to happen
# while a 5 s tool runs, so the test workers sweep every second.
FAST_RESTORE_ENV = "MATRIX_REDIS_RESTORE_EVERY_S"
QUOTA_LIMIT = 10
GATE_POLL_S = 0.02

if os.environ.get(FAST_RESTORE_ENV):
    from celery.signals import celeryd_init

    @celeryd_init.connect  # type: ignore[untyped-decorator]
    def _sweep_often(conf: Any, **_: Any) -> None:
        every = int(os.environ[FAST_RESTORE_ENV])
        options = dict(conf.broker_transport_options or {})
        options |= {"unacked_restore_interval": every, "unacked_restore_throttle": 1}
        conf.broker_transport_options = options


def _append(env: str, line: str) -> None:
    path = os.environ.get(env)
    if path:
        with Path(path).open("a") as out:  # one short append: atomic across processes
            out.write(line + "\n")


def effect(ctx: ToolContext) -> None:
    _append("OUTCOMES_SIDE_EFFECTS_FILE", f"{ctx.job_id} {ctx.attempt} {time.time():.6f}")


def mark(ctx: ToolContext, what: str, at: float | None = None) -> None:
    _append(MARKS_ENV, f"{ctx.job_id} {what} {time.time() if at is None else at:.6f}")


def wait_for_gate(gate: str, limit_s: float) -> None:
    deadline = time.monotonic() + limit_s
    while not Path(gate).exists() and time.monotonic() < deadline:
        time.sleep(GATE_POLL_S)  # polling a file the test creates


class Work(BaseModel):
    seconds: float = Field(default=0.0, ge=0, le=60)
    note: str = ""


def _busy(args: Work, ctx: ToolContext) -> None:
    """Simulated work that heartbeats every 0.5 s (as a well-behaved long tool does)."""
    mark(ctx, "entered")
    deadline = time.monotonic() + args.seconds
    while (left := deadline - time.monotonic()) > 0:
        ctx.heartbeat()
        time.sleep(min(0.5, left))


@tool("matrix.read", spends=False, timeout_s=60, max_attempts=3)
def read(args: Work, ctx: ToolContext) -> Succeeded:
    """Does not spend; optionally slow. Its runs are counted as effects too."""
    _busy(args, ctx)
    effect(ctx)
    return Succeeded(result={"read": True})


@tool("matrix.charge", spends=True, timeout_s=60)
def charge(args: Work, ctx: ToolContext) -> Succeeded:
    """Spends (at most once per job); optionally slow."""
    _busy(args, ctx)
    effect(ctx)
    return Succeeded(result={"charged": True})


class Gated(BaseModel):
    gate: str
    limit_s: float = Field(default=60.0, gt=0, le=120)


@tool("matrix.gated_charge", spends=True, timeout_s=120)
def gated_charge(args: Gated, ctx: ToolContext) -> Succeeded:
    """Spends once the gate opens: the test picks the moment the outcome is written."""
    mark(ctx, "entered")
    wait_for_gate(args.gate, args.limit_s)
    effect(ctx)
    mark(ctx, "left")
    return Succeeded(result={"charged": True})


@tool("matrix.gated_read", spends=False, timeout_s=120, max_attempts=3)
def gated_read(args: Gated, ctx: ToolContext) -> Succeeded:
    """Does not spend; finishes once the gate opens."""
    mark(ctx, "entered")
    wait_for_gate(args.gate, args.limit_s)
    effect(ctx)
    mark(ctx, "left")
    return Succeeded(result={"read": True})


class Steps(BaseModel):
    steps: int = Field(default=40, ge=1, le=200)
    step_s: float = Field(default=0.25, ge=0, le=5)
    catch: bool = False  # True: stop at the brake and report what was done (Partial)


@tool("matrix.steps", spends=True, timeout_s=90)
def steps(args: Steps, ctx: ToolContext) -> Succeeded | Partial:
    """Long multi-step work that re-checks the brake before every step."""
    done = 0
    for step in range(args.steps):
        began = time.time()  # the step's mark carries the moment its brake check began
        try:
            ctx.checkpoint()
        except BrakeEngaged:
            if not args.catch:
                raise
            skipped = [f"step {n}" for n in range(done, args.steps)]
            return Partial(
                result={"steps": done}, processed=done, skipped=skipped, total=args.steps
            )
        mark(ctx, f"step-{step}", at=began)
        time.sleep(args.step_s)  # simulated work of one step
        done += 1
    effect(ctx)
    return Succeeded(result={"steps": done})


@tool("matrix.quota_ten", spends=True, timeout_s=10, quota=Quota(limit=QUOTA_LIMIT, window_s=3600))
def quota_ten(args: Work, ctx: ToolContext) -> Succeeded:
    """At most ten accepted jobs per account per hour."""
    effect(ctx)
    return Succeeded(result={})

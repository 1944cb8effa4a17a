"""Every tool the test suites register, in one module: the test process imports it, and worker
processes load it through OUTCOMES_TOOLS=tests.tools.

Real effects are written where any process can count them:
- OUTCOMES_SIDE_EFFECTS_FILE: one line per real-world effect of a tool (`<job id> <attempt>
  <unix time> <pid>`), written before the tool reports (the checkers' `over_effects`);
- MATRIX_MARKS_FILE: progress marks (`<job id> <mark> <unix time>`): a tool entered, passed a
  step, left a gate. Marks are not effects.

A gate is a file path in the tool's arguments: the tool waits until the file exists. Tests open
gates to make a tool finish at a chosen moment (while Postgres is down, after a brake pull).
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import signal
import threading
import time
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field, SecretStr

from ledger.codes import Code
from ledger.error_info import ErrorInfo
from ledger.errors import BrakeEngaged
from ledger.outcomes import Declined, Partial, Succeeded, ToolFailure
from ledger.tools import Quota, ToolContext, tool

QUOTA_LIMIT = 10  # the quota tools'
MARKS_ENV = "MATRIX_MARKS_FILE"
# Test harness knob (see test_matrix_brokers): kombu's Redis transport sweeps for messages past
# their visibility timeout only every `unacked_restore_interval * unacked_restore_throttle`
# seconds (10 x 10 by default in the prefork event loop). The scenario needs the sweep to happen
# while a 5 s tool runs, so the test workers sweep every second.
FAST_RESTORE_ENV = "MATRIX_REDIS_RESTORE_EVERY_S"
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
    """One line per real effect, written before the tool reports anything."""
    line = f"{ctx.job_id} {ctx.attempt} {time.time():.6f} {os.getpid()}"
    _append("OUTCOMES_SIDE_EFFECTS_FILE", line)


def mark(ctx: ToolContext, what: str, at: float | None = None) -> None:
    _append(MARKS_ENV, f"{ctx.job_id} {what} {time.time() if at is None else at:.6f}")


def wait_for_gate(gate: str, limit_s: float) -> None:
    deadline = time.monotonic() + limit_s
    while not Path(gate).exists() and time.monotonic() < deadline:
        time.sleep(GATE_POLL_S)  # polling a file the test creates


# --- the HTTP API's tests ---------------------------------------------------------------------

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


# --- the lifecycle on real workers ------------------------------------------------------------


class Charge(BaseModel):
    amount: int = 1
    delay_s: float = Field(default=0.0, ge=0, le=5)


@tool("itest.charge", spends=True, timeout_s=30)
def charge(args: Charge, ctx: ToolContext) -> Succeeded:
    """A spending tool; optionally slow (it sleeps `delay_s` before charging)."""
    if args.delay_s:
        time.sleep(args.delay_s)  # simulated work
    effect(ctx)
    return Succeeded(result={"charged": args.amount})


@tool("itest.charge_flaky", spends=True, timeout_s=30, max_attempts=3)
def charge_flaky(args: Charge, ctx: ToolContext) -> Succeeded:
    """Charges, then fails retryably: a spending tool must not be retried all the same."""
    effect(ctx)
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
    effect(ctx)
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
    effect(ctx)
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
    effect(ctx)
    return None


@tool("itest.quota_ten", spends=True, timeout_s=10, quota=Quota(limit=QUOTA_LIMIT, window_s=3600))
def quota_ten(args: Probe, ctx: ToolContext) -> Succeeded:
    """At most ten accepted jobs per account per hour."""
    effect(ctx)
    return Succeeded(result={})


# --- worker loss and redelivery ---------------------------------------------------------------

POISON_MAX_ATTEMPTS = 3


class SlowCharge(BaseModel):
    seconds: float = Field(default=0.0, ge=0, le=60)
    amount: int = 1


@tool("rtest.slow_charge", spends=True, timeout_s=60)
def slow_charge(args: SlowCharge, ctx: ToolContext) -> Succeeded:
    """Spends first (the side effect is written), then works for `seconds`."""
    effect(ctx)
    time.sleep(args.seconds)  # simulated work after the money is gone
    return Succeeded(result={"charged": args.amount, "pid": os.getpid()})


class SlowProbe(BaseModel):
    seconds: float = Field(default=0.0, ge=0, le=20)


@tool("rtest.slow_probe", spends=False, timeout_s=30, max_attempts=2)
def slow_probe(args: SlowProbe, ctx: ToolContext) -> Succeeded:
    """A slow read (no spending): a lost attempt may be followed by the next one."""
    effect(ctx)
    time.sleep(args.seconds)  # simulated work
    return Succeeded(result={"attempt": ctx.attempt, "pid": os.getpid()})


class Poison(BaseModel):
    note: str = ""


@tool("rtest.poison", spends=False, timeout_s=30, max_attempts=POISON_MAX_ATTEMPTS)
def poison(args: Poison, ctx: ToolContext) -> Succeeded:
    """Kills the process that runs it, on every attempt (a segfaulting native library)."""
    effect(ctx)
    os.kill(os.getpid(), signal.SIGKILL)
    return Succeeded(result={})  # never reached


# --- the reliability matrix -------------------------------------------------------------------


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
def matrix_read(args: Work, ctx: ToolContext) -> Succeeded:
    """Does not spend; optionally slow. Its runs are counted as effects too."""
    _busy(args, ctx)
    effect(ctx)
    return Succeeded(result={"read": True})


@tool("matrix.charge", spends=True, timeout_s=60)
def matrix_charge(args: Work, ctx: ToolContext) -> Succeeded:
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
def matrix_quota_ten(args: Work, ctx: ToolContext) -> Succeeded:
    """At most ten accepted jobs per account per hour."""
    effect(ctx)
    return Succeeded(result={})


# --- the reconciler's use-case tests ---------------------------------------------------------

RECONCILE_SPENDS = "test.reconcile_spends"
RECONCILE_READS = "test.reconcile_reads"


class NoArgs(BaseModel):
    pass


@tool(RECONCILE_SPENDS, spends=True)
def reconcile_spends(args: NoArgs, ctx: ToolContext) -> Succeeded:
    return Succeeded()


@tool(RECONCILE_READS, spends=False, max_attempts=2)
def reconcile_reads(args: NoArgs, ctx: ToolContext) -> Succeeded:
    return Succeeded()


# --- a rolling deploy: the next release's tool needs a field the API's did not ---------------

NEXT_RELEASE_ENV = "TESTS_NEXT_RELEASE"  # set in a worker's environment: it runs the new release
SHIP = "rolling.ship"


class ShipThisRelease(BaseModel):
    order: str


class ShipNextRelease(BaseModel):
    order: str
    warehouse: str  # required from the next release on


ShipArgs = ShipNextRelease if os.environ.get(NEXT_RELEASE_ENV) else ShipThisRelease


@tool(SHIP, spends=True, timeout_s=10)
def ship(args: ShipArgs, ctx: ToolContext) -> Succeeded:
    """Ships an order (spends): it must never run on arguments its release cannot read."""
    effect(ctx)
    return Succeeded(result={"shipped": args.order})


# --- secrets canaries: a tool that repeats its argument wherever a tool may write text --------

CANARY_GATE = threading.Event()  # in-process tests: the late tool waits for it (set by the test)


class Secret(BaseModel):
    secret: SecretStr  # declared: sealed at rest, scrubbed wherever the tool repeats it


@tool("canary.crash", spends=False, max_attempts=1)
def canary_crash(args: Secret, ctx: ToolContext) -> Succeeded:
    """Crashes with its argument in the text: as is, inside a URL, a pair and a repr."""
    secret = args.secret.get_secret_value()
    raise RuntimeError(
        f"{secret} | postgresql://admin:{secret}@db:5432/x | "
        f"password={secret}; {{'token': {secret!r}}}"
    )


@tool("canary.refuse", spends=False, max_attempts=1)
def canary_refuse(args: Secret, ctx: ToolContext) -> Succeeded:
    """A typed failure with its argument in every text field."""
    secret = args.secret.get_secret_value()
    raise ToolFailure(
        code=Code.ACCESS_DENIED,
        dependency=f"vault {secret}",
        operation=f"log in as {secret}",
        required_capability=f"cap {secret}",
        safe_fallback=f"retry with {secret}",
        fix=f"rotate {secret}",
        message=f"The vault refused {secret}.",
        fingerprint=f"credentials {secret}",
    )


@tool("canary.flaky", spends=False, max_attempts=2)
def canary_flaky(args: Secret, ctx: ToolContext) -> Succeeded:
    """Retryable, with its argument in the fingerprint and the message: a retry is dispatched."""
    secret = args.secret.get_secret_value()
    raise ToolFailure(
        code=Code.SOURCE_UNRELIABLE,
        dependency="index",
        operation="query",
        retryable=True,
        message=f"The index timed out on {secret}.",
        fingerprint=f"generation {ctx.attempt} {secret}",
    )


@tool("canary.decline", spends=False)
def canary_decline(args: Secret, ctx: ToolContext) -> Declined:
    return Declined(reason=f"already done for {args.secret.get_secret_value()}")


@tool("canary.halt", spends=False)
def canary_halt(args: Secret, ctx: ToolContext) -> Succeeded:
    """Raises a brake of its own making (its text is the tool's, not an operator's)."""
    message = f"stopped at {args.secret.get_secret_value()}"
    raise BrakeEngaged(ErrorInfo(code=Code.BRAKE_ENGAGED, message=message))


@tool("canary.late", spends=False, max_attempts=1, timeout_s=60)
def canary_late(args: Secret, ctx: ToolContext) -> Succeeded:
    """Crashes with its argument once the test lets it go (after the job was closed)."""
    CANARY_GATE.wait(30)
    raise RuntimeError(f"late: {args.secret.get_secret_value()}")


# --- async tools: run on the worker's event loop beside the sync ones -------------------------


class Meet(BaseModel):
    """Two jobs that meet: each writes `<folder>/<me>`, then waits for `<folder>/<other>`."""

    folder: str
    me: str
    other: str
    limit_s: float = Field(default=30.0, gt=0, le=60)


def _where(ctx: ToolContext) -> dict[str, Any]:
    return {"pid": os.getpid(), "thread": threading.current_thread().name, "attempt": ctx.attempt}


@tool("atest.meet_async", timeout_s=60, max_attempts=1)
async def meet_async(args: Meet, ctx: ToolContext) -> Succeeded:
    """Succeeds only if its partner runs at the same time (in the same worker, for the test)."""
    Path(args.folder, args.me).touch()
    deadline = time.monotonic() + args.limit_s
    while not Path(args.folder, args.other).exists():
        if time.monotonic() > deadline:
            raise ToolFailure(
                code=Code.SOURCE_UNRELIABLE,
                dependency="partner",
                operation="meet",
                message="The partner never came.",
            )
        await asyncio.sleep(GATE_POLL_S)
    await ctx.aheartbeat()
    return Succeeded(result=_where(ctx))


@tool("atest.meet_sync", timeout_s=60, max_attempts=1)
def meet_sync(args: Meet, ctx: ToolContext) -> Succeeded:
    Path(args.folder, args.me).touch()
    wait_for_gate(str(Path(args.folder, args.other)), args.limit_s)
    if not Path(args.folder, args.other).exists():
        raise ToolFailure(
            code=Code.SOURCE_UNRELIABLE,
            dependency="partner",
            operation="meet",
            message="The partner never came.",
        )
    return Succeeded(result=_where(ctx))


class AsyncSteps(BaseModel):
    folder: str  # one file per step done: `<folder>/step-<n>`
    steps: int = Field(default=200, ge=1, le=1000)
    step_s: float = Field(default=0.05, ge=0, le=5)


@tool("atest.slow_async", timeout_s=0.5, max_attempts=1)
async def slow_async(args: AsyncSteps, ctx: ToolContext) -> Succeeded:
    """Outlives its deadline; records whether the deadline cancelled it."""
    try:
        await asyncio.sleep(60)
    except asyncio.CancelledError:
        Path(args.folder, "cancelled").touch()
        raise
    return Succeeded()


@tool("atest.steps_async", spends=True, timeout_s=60)
async def steps_async(args: AsyncSteps, ctx: ToolContext) -> Succeeded:
    """Long multi-step async work that re-checks the brake before every step."""
    for step in range(args.steps):
        await ctx.acheckpoint()
        Path(args.folder, f"step-{step}").touch()
        await asyncio.sleep(args.step_s)
    effect(ctx)
    return Succeeded(result={"steps": args.steps})


async def _never_awaited(folder: str) -> Succeeded:
    Path(folder, "ran").touch()
    return Succeeded()


@tool("atest.sync_returns_coroutine", max_attempts=1)
def sync_returns_coroutine(args: AsyncSteps, ctx: ToolContext) -> Any:
    """Declared `def`, hands back a coroutine: must be a typed failure, never success."""
    return _never_awaited(args.folder)


# --- declared secrets and budgeted answers (issue 26) ----------------------------------------


class VaultLogin(BaseModel):
    """A login to a named vault: the password is declared secret, the rest is not."""

    vault: str
    user: str
    password: SecretStr
    mode: str = "crash"  # "crash": an exception; "refuse": a ToolFailure; "ok": success
    proof: str = ""  # a file the tool writes the SHA-256 of the password it received into


@tool("vault.login", spends=False, max_attempts=1)
def vault_login(args: VaultLogin, ctx: ToolContext) -> Succeeded:
    """Logs in to a vault; fails quoting every argument, the password included."""
    password = args.password.get_secret_value()
    if args.proof:
        Path(args.proof).write_text(hashlib.sha256(password.encode()).hexdigest())
    if args.mode == "refuse":
        raise ToolFailure(
            code=Code.ACCESS_DENIED,
            dependency=f"vault {args.vault}",
            operation=f"log in as {args.user}",
            required_capability=f"{args.vault}:login",
            fix=f"ask the owner of {args.vault} to let {args.user} in (password {password})",
            message=f"The vault {args.vault} refused {args.user} with password {password}.",
            fingerprint=f"{args.vault}/{args.user}/{password}",
        )
    if args.mode == "ok":
        return Succeeded(result={"vault": args.vault, "user": args.user, "echo": password})
    raise RuntimeError(f"login to {args.vault} as {args.user} failed: password={password!r}")


class Listing(BaseModel):
    items: int = Field(default=10, ge=0, le=1_000_000)
    item_bytes: int = Field(default=100, ge=1, le=100_000)
    count_when_over: bool = False  # answer a count instead of the list when it does not fit


@tool("budget.listing", timeout_s=60, max_attempts=1)
def budget_listing(args: Listing, ctx: ToolContext) -> Succeeded:
    """Lists `items` texts of `item_bytes` each (ten of them make a 10 MB answer)."""
    items = [f"{n:08d}".ljust(args.item_bytes, "x") for n in range(args.items)]
    if args.count_when_over:
        return Succeeded(result=ctx.list_or_count("items", items, total=args.items))
    return Succeeded(result={"items": items, "total": args.items})


@tool("budget.small_cap", max_result_bytes=1024, max_attempts=1)
def budget_small_cap(args: Listing, ctx: ToolContext) -> Succeeded:
    """The same list under a 1 KiB cap of its own."""
    items = [f"{n:08d}".ljust(args.item_bytes, "x") for n in range(args.items)]
    return Succeeded(result={"items": items, "total": args.items})


# --- people in the loop (docs/approvals.md, docs/turns.md) ------------------------------------

APPROVED_CHARGE = "itest.charge_approved"
LARGE_CHARGE = "itest.charge_if_large"
APPROVED_METERED = "itest.charge_approved_metered"
FAILING_CHARGE = "itest.charge_failing"
LOOKUP = "itest.lookup"


@tool(APPROVED_CHARGE, spends=True, timeout_s=30, approval=True, approval_expires_s=3600)
def charge_approved(args: Charge, ctx: ToolContext) -> Succeeded:
    """A spending tool whose every call waits for a person's approval."""
    effect(ctx)
    return Succeeded(result={"charged": args.amount})


def _large(args: Charge) -> str | None:
    return f"a charge of {args.amount} is over 100" if args.amount > 100 else None


@tool(LARGE_CHARGE, spends=True, timeout_s=30, approval=_large)
def charge_if_large(args: Charge, ctx: ToolContext) -> Succeeded:
    """A spending tool whose large calls wait for a person's approval."""
    effect(ctx)
    return Succeeded(result={"charged": args.amount})


@tool(APPROVED_METERED, spends=True, approval=True, quota=Quota(limit=1, window_s=3600))
def charge_approved_metered(args: Charge, ctx: ToolContext) -> Succeeded:
    """Approval and a quota of one call an hour: the second is refused, never parked."""
    effect(ctx)
    return Succeeded(result={"charged": args.amount})


@tool(FAILING_CHARGE, spends=True, timeout_s=30)
def charge_failing(args: Charge, ctx: ToolContext) -> Succeeded:
    """A spending tool whose provider is unreliable: it always fails, not retryable."""
    raise ToolFailure(
        code=Code.SOURCE_UNRELIABLE,
        dependency="payments",
        operation="charge the card",
        retryable=False,
        message="The payment provider answered with an error.",
    )


@tool(LOOKUP, read_only=True, timeout_s=30)
def lookup(args: Probe, ctx: ToolContext) -> Succeeded:
    """A pure read."""
    return Succeeded(result={"note": args.note})

"""Async tools on a ledger in memory: `async def` tools run on the process's event loop under
the same deadline, checkpoint and outcome rules as `def` tools, and a `def` tool that hands
back a coroutine is a typed failure (`TOOL_CRASHED`), never a success."""

from __future__ import annotations

import asyncio
import threading

import pytest
from pydantic import BaseModel

from ledger.codes import Code, Status
from ledger.decisions import Caller, JobRequest
from ledger.errors import ConfigurationError
from ledger.events import job_stream
from ledger.job_view import JobView
from ledger.outcomes import Succeeded
from ledger.runtime.ledger import Ledger
from ledger.services import brakes
from ledger.services.execute import Executor
from ledger.services.submit import submit
from ledger.tools import ToolContext, get_tool, tool
from tests.factories import get_job

AGENT = Caller(account="acme", token_id="tok-acme")
RAN: list[str] = []
CANCELLED = threading.Event()
STEP_ONE_DONE = threading.Event()
BRAKE_PULLED = threading.Event()


class Note(BaseModel):
    text: str = ""


@tool("aexec.ok")
async def ok(args: Note, ctx: ToolContext) -> Succeeded:
    await asyncio.sleep(0)
    await ctx.aheartbeat()
    RAN.append(ctx.job_id)
    return Succeeded(result={"echo": args.text, "thread": threading.current_thread().name})


@tool("aexec.slow", timeout_s=0.2, max_attempts=1)
async def slow(args: Note, ctx: ToolContext) -> Succeeded:
    try:
        await asyncio.sleep(30)  # outlives its deadline
    except asyncio.CancelledError:
        CANCELLED.set()
        raise
    return Succeeded()


@tool("aexec.steps")
async def steps(args: Note, ctx: ToolContext) -> Succeeded:
    await ctx.acheckpoint()  # no brake yet: passes
    STEP_ONE_DONE.set()
    await asyncio.to_thread(BRAKE_PULLED.wait, 10)
    await ctx.acheckpoint()  # the brake was pulled between steps: this raises
    RAN.append(ctx.job_id)
    return Succeeded()


async def _work(job_id: str) -> Succeeded:
    RAN.append(job_id)
    return Succeeded()


@tool("aexec.sync_returns_coroutine", spends=True)
def sync_returns_coroutine(args: Note, ctx: ToolContext) -> object:
    return _work(ctx.job_id)  # forgot to declare itself async


@tool("aexec.forgot_await")
async def forgot_await(args: Note, ctx: ToolContext) -> object:
    return _work(ctx.job_id)  # an async tool returning an un-awaited coroutine


@tool("aexec.own_timeout", timeout_s=300, max_attempts=1)
async def own_timeout(args: Note, ctx: ToolContext) -> Succeeded:
    await asyncio.wait_for(asyncio.Event().wait(), 0.01)  # raises the builtin TimeoutError
    return Succeeded()


@tool("aexec.sync_own_timeout", timeout_s=300, max_attempts=1)
def sync_own_timeout(args: Note, ctx: ToolContext) -> Succeeded:
    raise TimeoutError("the provider did not answer")


def run(ledger: Ledger, tool_name: str, args: dict[str, object] | None = None) -> JobView:
    job = submit(ledger, AGENT, JobRequest(tool_name, args or {})).view
    Executor(ledger, "w-1").execute(job.job_id)
    view = get_job(ledger, job.job_id)
    assert view is not None
    return view


def test_async_def_is_registered_as_async_and_def_is_not() -> None:
    spec = get_tool("aexec.ok")
    assert spec is not None and spec.is_async
    other = get_tool("aexec.sync_returns_coroutine")
    assert other is not None and not other.is_async


def test_an_async_generator_is_refused_at_registration() -> None:
    async def stream(args: Note, ctx: ToolContext):  # type: ignore[no-untyped-def]
        yield Succeeded()

    with pytest.raises(ConfigurationError, match="generator"):
        tool("aexec.stream")(stream)
    assert get_tool("aexec.stream") is None


def test_an_async_tool_succeeds_on_the_shared_loop(memory_ledger: Ledger) -> None:
    first = run(memory_ledger, "aexec.ok", {"text": "hi"})
    second = run(memory_ledger, "aexec.ok", {"text": "again"})
    assert (first.status, second.status) == (Status.SUCCEEDED, Status.SUCCEEDED)
    assert first.result is not None and second.result is not None
    assert first.result["echo"] == "hi" and first.result["thread"] == "tool-loop"
    assert second.result["thread"] == first.result["thread"]  # one loop for every job
    assert {first.job_id, second.job_id} <= set(RAN)
    assert memory_ledger.store.state.leases == {}  # type: ignore[attr-defined]


def test_an_async_tool_past_its_deadline_is_cancelled_and_deadline_exceeded(
    memory_ledger: Ledger,
) -> None:
    view = run(memory_ledger, "aexec.slow")
    assert (view.status, view.code) == (Status.FAILED, Code.DEADLINE_EXCEEDED)
    assert CANCELLED.wait(10), "the deadline did not cancel the tool's task"


def test_a_brake_pulled_during_async_steps_halts_it_at_the_checkpoint(
    memory_ledger: Ledger,
) -> None:
    job = submit(memory_ledger, AGENT, JobRequest("aexec.steps", {})).view
    runner = threading.Thread(target=Executor(memory_ledger, "w-1").execute, args=(job.job_id,))
    runner.start()
    assert STEP_ONE_DONE.wait(10)
    brake = brakes.pull(memory_ledger, "tool:aexec.steps", "stop now", "olga")
    BRAKE_PULLED.set()
    runner.join(10)
    view = get_job(memory_ledger, job.job_id)
    assert view is not None and view.error is not None
    assert (view.status, view.code, view.error.cause) == (
        Status.REFUSED,
        Code.BRAKE_ENGAGED,
        brake.brake_id,
    )
    assert job.job_id not in RAN


@pytest.mark.parametrize("tool_name", ["aexec.sync_returns_coroutine", "aexec.forgot_await"])
def test_a_returned_coroutine_is_a_typed_failure_and_never_runs(
    memory_ledger: Ledger, tool_name: str, recwarn: pytest.WarningsRecorder
) -> None:
    view = run(memory_ledger, tool_name)
    assert view.error is not None
    assert (view.status, view.code, view.next_action) == (
        Status.FAILED,
        Code.TOOL_CRASHED,
        "stop_and_report",
    )
    assert "async def" in (view.error.fix or "")
    (failed,) = [
        e
        for e in memory_ledger.store.read_stream(job_stream(view.job_id))
        if e.type == "work.failed"
    ]
    assert "coroutine" in failed.data["detail"]
    assert view.job_id not in RAN  # the coroutine was closed, not run
    assert not [w for w in recwarn if "never awaited" in str(w.message)]


@pytest.mark.parametrize("tool_name", ["aexec.own_timeout", "aexec.sync_own_timeout"])
def test_a_tools_own_timeout_error_is_its_crash_not_the_deadline(
    memory_ledger: Ledger, tool_name: str
) -> None:
    """Before: the waiting thread took the tool's TimeoutError for its own wait running out and
    spun until the tool's 300 s deadline, then recorded DEADLINE_EXCEEDED."""
    view = run(memory_ledger, tool_name)
    assert (view.status, view.code) == (Status.FAILED, Code.TOOL_CRASHED)

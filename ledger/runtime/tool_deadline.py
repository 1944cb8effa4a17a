"""A tool's run under its deadline: in a kept thread (or, for an async tool, on the one tool
loop), the lease renewed every third of it meanwhile; past the deadline the run is given up
and whatever it returns later is not recorded (`DeadlineExceeded`)."""

from __future__ import annotations

import contextvars
import functools
import inspect
import time
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

from pydantic import BaseModel

from ledger.errors import AwaitableReturned, DeadlineExceeded
from ledger.job_view import JobView
from ledger.runtime.batching import DaemonThreads
from ledger.runtime.tool_loop import ToolLoop
from ledger.tools import ToolContext, ToolSpec
from ledger.tracing import tracer

Heartbeat = Callable[[str, int], None]  # (job id, attempt): renew that attempt's lease


class DeadlineRun:
    def __init__(
        self, threads: DaemonThreads, loop: ToolLoop, beat_every_s: float, heartbeat: Heartbeat
    ) -> None:
        self._threads = threads
        self._loop = loop
        self._beat_every_s = beat_every_s
        self._heartbeat = heartbeat

    def call(self, spec: ToolSpec, args: BaseModel, ctx: ToolContext, view: JobView) -> Any:
        """Run the tool in a thread (or, if async, on the loop); meanwhile renew the lease every
        third of the lease. Both kinds are waited for here, so one deadline rule holds for both."""
        future = self._start(spec, args, ctx)
        beat_every = self._beat_every_s
        start = time.monotonic()
        deadline, next_beat = start + spec.timeout_s, start + beat_every
        while True:
            wait = min(deadline, next_beat) - time.monotonic()
            if wait > 0:
                try:
                    return future.result(timeout=wait)
                except TimeoutError:
                    # The tool's own TimeoutError (`asyncio.wait_for` raises it) is a result,
                    # not this wait running out: never spin on it until the deadline.
                    if future.done():
                        raise
            moment = time.monotonic()
            if moment >= deadline:
                # A thread cannot be killed, a task can be cancelled (CancelledError at its
                # next await); either way, whatever it returns later is not recorded.
                if spec.is_async:  # only the loop's future: the thread's would refuse its result
                    future.cancel()
                raise DeadlineExceeded(spec.timeout_s)
            if moment >= next_beat:
                self._heartbeat(view.job_id, view.attempts)
                next_beat = moment + beat_every

    def _start(self, spec: ToolSpec, args: BaseModel, ctx: ToolContext) -> Future[Any]:
        if spec.is_async:
            return self._loop.submit(_awaited(spec, args, ctx))
        future: Future[Any] = Future()

        def target() -> None:
            try:
                future.set_result(spec.func(args, ctx))
            except BaseException as exc:
                future.set_exception(exc)

        if tracer().enabled:  # the run's span stays ambient in the tool's own thread
            target = functools.partial(contextvars.copy_context().run, target)
        self._threads.run(target)
        return future


async def _awaited(spec: ToolSpec, args: BaseModel, ctx: ToolContext) -> Any:
    return await spec.func(args, ctx)


def not_awaitable(value: Any) -> Any:
    """A `def` tool that returns a coroutine never ran its work: a failure, never a success."""
    if inspect.isawaitable(value):
        if inspect.iscoroutine(value):
            value.close()  # nobody will await it: no "never awaited" warning, no half-run body
        raise AwaitableReturned(type(value).__name__)
    return value

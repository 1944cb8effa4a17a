"""The event loop that runs `async def` tools: one loop, on one daemon thread, per process.

Why one shared loop rather than one per worker thread:
- the task threads already bound how many tools run at once, and the watchdog keeps each
  deadline and lease from outside the loop, so a loop per thread would buy no extra safety,
  only a thread per async tool again;
- asyncio resources (an `httpx.AsyncClient`, a connection pool) belong to the loop that made
  them: on one long-lived loop a tool module can keep one for every job, across threads;
- a task on a loop can be cancelled at its deadline (a thread cannot): `CancelledError` at its
  next `await`.
The price: an async tool that blocks (a sync call inside `async def`) stalls every async tool of
the process. Deadlines still fire: the watchdog (`watchdog.py`) keeps them, not the loop.

Keyed by pid: a prefork child starts its own loop instead of inheriting a parent's dead thread.
"""

from __future__ import annotations

import asyncio
import inspect
import os
import threading
from collections.abc import Coroutine
from concurrent.futures import Future
from typing import Any, TypeVar

from pydantic import BaseModel

from ledger.errors import AwaitableReturned
from ledger.tools import ToolContext, ToolSpec

T = TypeVar("T")


class ToolLoop:
    def __init__(self, name: str = "tool-loop") -> None:
        self._name = name
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._pid: int | None = None

    def submit(self, coroutine: Coroutine[Any, Any, T]) -> Future[T]:
        """Schedule the coroutine; cancelling the future cancels its task on the loop."""
        return asyncio.run_coroutine_threadsafe(coroutine, self._running())

    def _running(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            if self._loop is None or self._pid != os.getpid():
                loop = asyncio.new_event_loop()
                # Daemon: a tool stuck past its deadline must not keep the process alive.
                thread = threading.Thread(target=_serve, args=(loop,), name=self._name, daemon=True)
                thread.start()
                self._loop, self._pid = loop, os.getpid()
            return self._loop


def _serve(loop: asyncio.AbstractEventLoop) -> None:
    asyncio.set_event_loop(loop)
    loop.run_forever()


SHARED = ToolLoop()  # every Executor of the process: one loop, as the module docstring says


async def awaited(spec: ToolSpec, args: BaseModel, ctx: ToolContext) -> Any:
    """An `async def` tool's run, as a coroutine for `ToolLoop.submit`."""
    return await spec.func(args, ctx)


def not_awaitable(value: Any) -> Any:
    """A `def` tool that returns a coroutine never ran its work: a failure, never a success."""
    if inspect.isawaitable(value):
        if inspect.iscoroutine(value):
            value.close()  # nobody will await it: no "never awaited" warning, no half-run body
        raise AwaitableReturned(type(value).__name__)
    return value

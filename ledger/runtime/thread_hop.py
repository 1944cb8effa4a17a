"""One hop from the event loop to a thread, at its least cost, for the agents' hot path.

A short blocking call (a read, a decision's append) runs on a thread so that the loop keeps
serving while it waits on the database. anyio's `to_thread.run_sync` (what Starlette's
`run_in_threadpool` calls) detects the async library, opens a cancel scope and takes a
capacity-limiter token on every call; asyncio's own executor does only the hop. A no-op
hop on uvloop cost 97-116 us of CPU that way, 76-85 us this way; the rest is the thread's
wake-up, which is why the GET's reads on Postgres take no hop at all (`loop_reads`).

The pool is as large as anyio's default limiter (40), so as many calls may block at once as
before. A caller cancelled while its call runs stops waiting; the call itself finishes on
its thread (a decision it was recording is recorded all the same, as with a client that
disconnects).
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import ParamSpec, TypeVar

P = ParamSpec("P")
T = TypeVar("T")

THREADS = 40  # anyio's default: how many hot-path calls may block at once

_pool = ThreadPoolExecutor(max_workers=THREADS, thread_name_prefix="outcomes-hop")


async def in_thread(call: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
    """`call(*args, **kwargs)` on a pool thread, in a copy of the caller's context (so that
    context variables, a trace's among them, cross the hop as they do with anyio)."""
    loop = asyncio.get_running_loop()
    context = contextvars.copy_context()
    bound = functools.partial(context.run, call, *args, **kwargs)
    return await loop.run_in_executor(_pool, bound)

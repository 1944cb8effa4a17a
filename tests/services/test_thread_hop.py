"""The hot path's thread hop: the call runs off the loop, in the caller's context, its error
raised to the caller, and as many calls may block at once as anyio allowed."""

from __future__ import annotations

import asyncio
import contextvars
import threading

import pytest

from ledger.runtime.thread_hop import THREADS, in_thread

TRACE: contextvars.ContextVar[str] = contextvars.ContextVar("trace", default="none")


def test_the_call_runs_on_another_thread_in_the_callers_context() -> None:
    async def scenario() -> tuple[str, str, int]:
        TRACE.set("trace-1")
        return await in_thread(lambda: (TRACE.get(), threading.current_thread().name, 7))

    seen, thread, value = asyncio.run(scenario())
    assert (seen, value) == ("trace-1", 7)
    assert thread.startswith("outcomes-hop") and thread != threading.current_thread().name


def test_an_error_in_the_call_is_raised_to_the_caller() -> None:
    def fails() -> None:
        raise KeyError("gone")

    with pytest.raises(KeyError, match="gone"):
        asyncio.run(in_thread(fails))


def test_as_many_calls_block_at_once_as_the_pool_allows() -> None:
    # Each call waits for all the others: this finishes only if THREADS run at the same time.
    together = threading.Barrier(THREADS, timeout=20)

    async def scenario() -> list[int]:
        return await asyncio.gather(*(in_thread(together.wait) for _ in range(THREADS)))

    assert sorted(asyncio.run(scenario())) == list(range(THREADS))

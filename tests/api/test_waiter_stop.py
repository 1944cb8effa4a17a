"""The API's long-poll waiter stops even when its poller loses a cancel: on Python 3.11,
`asyncio.wait_for` can swallow a cancel that lands as its wait ends, and a poller that kept
looping hung the API's shutdown for good (a test's teardown waited 300 s)."""

from __future__ import annotations

import asyncio
import contextlib

import pytest

from api.waiter import JobWaiter
from ledger.runtime.ledger import Ledger


def test_the_waiter_stops_though_its_poller_swallows_the_cancel(
    memory_ledger: Ledger, monkeypatch: pytest.MonkeyPatch
) -> None:
    ticks = 0

    async def tick_losing_cancels(self: JobWaiter) -> None:
        nonlocal ticks
        ticks += 1
        with contextlib.suppress(asyncio.CancelledError):  # a lost cancel, as the loop sees it
            await asyncio.sleep(0.01)

    monkeypatch.setattr(JobWaiter, "_tick", tick_losing_cancels)

    async def run() -> None:
        waiter = JobWaiter(memory_ledger, poll_s=0.01)
        await waiter.ensure_started()
        await asyncio.sleep(0.05)
        await asyncio.wait_for(waiter.stop(), timeout=10)

    asyncio.run(run())
    assert ticks > 1  # the poller ran, then stopped

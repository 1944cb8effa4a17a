"""One wait loop for everyone who waits on a job: the API's `?wait` and MCP's calls.

The caller opens a `Watch` *before* its first read (so a change committed in between still
wakes it) and hands that read in; the loop re-reads only when the watch hints that the job
moved past the position last read. Hints are only hints: the re-read decides.

`until="terminal"` returns only at an outcome (or when the budget is spent): what an agent
wants, one request per call. `until="change"` also returns as soon as the status moves (the
API's default `?wait`, for callers that follow a job step by step).
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import Literal, Protocol

from ledger.job_view import JobView

Until = Literal["change", "terminal"]
Progress = Callable[[JobView, float], Awaitable[None]]


class Watch(Protocol):
    known_position: int

    async def changed(self, timeout: float) -> bool:
        """Wait up to `timeout` s for a hint that the job moved past `known_position`."""
        ...


async def settle(
    watch: Watch,
    view: JobView,
    read: Callable[[], Awaitable[JobView]],
    budget_s: float,
    *,
    until: Until = "terminal",
    tick_s: float | None = None,
    progress: Progress | None = None,
) -> tuple[JobView, float]:
    """Wait from `view` (the read made after opening `watch`) until the job is terminal (or,
    with until="change", its status moved) or `budget_s` is spent. `progress` is awaited
    after each read and at least every `tick_s` seconds. Returns the last view and the wait."""
    started = time.monotonic()
    first = view.status
    if progress is not None:
        await progress(view, 0.0)
    while not (view.terminal or (until == "change" and view.status != first)):
        left = started + budget_s - time.monotonic()
        if left <= 0:
            break
        watch.known_position = view.ledger_position
        hinted = await watch.changed(left if tick_s is None else min(left, tick_s))
        if hinted:
            view = await read()
        if progress is not None:
            await progress(view, time.monotonic() - started)
    return view, time.monotonic() - started

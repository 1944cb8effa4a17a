"""What a store may hand out beside reads and writes, where its backend has them: a bid to
lead the sequencing, a listener for job changes and job reads on the event loop."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any, Protocol

from ledger.job_view import JobView


class SequencerLeader(Protocol):
    """A process's bid to be the one sequencer (Postgres), on a connection of its own."""

    @property
    def leading(self) -> bool: ...

    def lead(self) -> bool: ...

    def tick(self) -> int: ...

    def wait(self, timeout_s: float) -> None: ...

    def reset(self) -> None: ...

    def close(self) -> None: ...


class Listener(Protocol):
    """Wakes long-polls when jobs change (Postgres LISTEN); only ever a hint."""

    connected: asyncio.Event

    def run(self) -> Coroutine[Any, Any, None]: ...


class LoopReads(Protocol):
    """A job's read on the event loop that made it (Postgres: `loop_reads.LoopJobReads`)."""

    async def read_job(
        self, job_id: str, token_id: str | None = None
    ) -> tuple[JobView | None, bool]: ...

    async def close(self) -> None: ...


# The jobs that changed, and of those the ones that ended (a terminal event): waiters for an
# outcome only need waking for these.
OnJobs = Callable[[list[str], set[str]], None]
OnConnect = Callable[[], None]

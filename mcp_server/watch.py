"""Waiting for a job to change. Over HTTP the API hands in its long-poll waiter (LISTEN/NOTIFY
on Postgres, one shared poll elsewhere); `outcomes mcp` has no API, so it polls the job's
position, one small read per tick while a call waits."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator
from typing import Protocol

import anyio
import anyio.to_thread

from ledger.runtime.ledger import Ledger
from ledger.runtime.settle import Watch
from ledger.services import jobs

POLL_S = 0.05


class Watcher(Protocol):
    def watch(self, job_id: str) -> contextlib.AbstractContextManager[Watch]: ...


class PolledWatch:
    def __init__(self, ledger: Ledger, job_id: str, poll_s: float) -> None:
        self._ledger = ledger
        self._job_id = job_id
        self._poll_s = poll_s
        self.known_position = sys.maxsize

    async def changed(self, timeout: float) -> bool:
        deadline = anyio.current_time() + timeout
        while True:
            found = await anyio.to_thread.run_sync(jobs.positions, self._ledger, [self._job_id])
            if found.get(self._job_id, 0) > self.known_position:
                return True
            left = deadline - anyio.current_time()
            if left <= 0:
                return False
            await anyio.sleep(min(self._poll_s, left))


class PollingWatcher:
    def __init__(self, ledger: Ledger, poll_s: float = POLL_S) -> None:
        self._ledger = ledger
        self._poll_s = poll_s

    @contextlib.contextmanager
    def watch(self, job_id: str) -> Iterator[Watch]:
        yield PolledWatch(self._ledger, job_id, self._poll_s)

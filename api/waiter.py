"""Long-poll wake-ups: who waits for which job, and what wakes them.

A waiter registers a `Watch` *before* it reads the job, so a change that commits between
the read and the wait is never missed. Two sources wake watches, both only hints (a woken
request re-reads the job and decides for itself):

- Postgres: LISTEN on the ledger's NOTIFY channel (sent in the appending transaction);
- every backend: a poll that reads the `ledger_position` of the watched jobs only, one query
  per tick however many requests wait (fast on SQLite, a slow safety net on Postgres).

Everything here runs on the server's event loop; no thread touches the watch table.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sys
from collections.abc import Callable, Collection, Iterable, Iterator
from dataclasses import dataclass, field

from starlette.concurrency import run_in_threadpool

from ledger.services import jobs
from ledger.services.ledger import Ledger

log = logging.getLogger(__name__)

LISTEN_POLL_S = 1.0  # with LISTEN working, polling only covers lost notifications
PLAIN_POLL_S = 0.05  # SQLite has no NOTIFY: poll briskly (one small query per tick)
LISTEN_READY_S = 2.0  # how long a first waiter waits for LISTEN before relying on polls


@dataclass(eq=False)
class Watch:
    job_id: str
    on_wait: Callable[[str], None] | None = None
    # Waits for the outcome only: a pushed hint that the job moved on without ending (it
    # started, it is retrying) does not wake it, sparing a read. The poll still does.
    until_terminal: bool = False
    # The position the request last read; until its first read, nothing is worth a wake-up
    # from the poller (that read comes after registering, so it sees any change already).
    known_position: int = sys.maxsize
    event: asyncio.Event = field(default_factory=asyncio.Event)

    async def changed(self, timeout: float) -> bool:
        """Wait up to `timeout` seconds for a hint that the job moved; True if one came."""
        if self.on_wait is not None:
            self.on_wait(self.job_id)
        try:
            await asyncio.wait_for(self.event.wait(), timeout)
        except TimeoutError:
            return False
        self.event.clear()
        return True


class JobWaiter:
    def __init__(self, ledger: Ledger, poll_s: float | None = None) -> None:
        self._ledger = ledger
        self._listener = jobs.listener(ledger, self.wake, self.wake_all)
        self.poll_s = poll_s or (LISTEN_POLL_S if self._listener else PLAIN_POLL_S)
        self._watches: dict[str, set[Watch]] = {}
        self._tasks: list[asyncio.Task[None]] = []
        self._loop: asyncio.AbstractEventLoop | None = None
        # Test and bench hook: called with the job id when a request starts to wait.
        self.on_wait: Callable[[str], None] | None = None

    @property
    def watching(self) -> int:
        return sum(len(w) for w in self._watches.values())

    async def ensure_started(self) -> None:
        """Start the listener and the poller on the running loop (again, if the loop changed)."""
        loop = asyncio.get_running_loop()
        if self._loop is loop:
            return
        self._loop = loop
        self._tasks = [loop.create_task(self._poll_forever(), name="long-poll poller")]
        if self._listener is not None:
            self._tasks.append(loop.create_task(self._listener.run(), name="long-poll listener"))
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._listener.connected.wait(), LISTEN_READY_S)

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._tasks = []
        self._loop = None

    @contextlib.contextmanager
    def watch(self, job_id: str, *, until_terminal: bool = False) -> Iterator[Watch]:
        watch = Watch(job_id, self.on_wait, until_terminal)
        self._watches.setdefault(job_id, set()).add(watch)
        try:
            yield watch
        finally:
            mine = self._watches.get(job_id)
            if mine is not None:
                mine.discard(watch)
                if not mine:
                    del self._watches[job_id]

    def wake(self, job_ids: Iterable[str], ended: Collection[str] | None = None) -> None:
        """Wake the watches of these jobs; with `ended` (the ones that reached an outcome),
        a watch that waits for the outcome only wakes for those."""
        for job_id in job_ids:
            for watch in self._watches.get(job_id, ()):
                if ended is None or not watch.until_terminal or job_id in ended:
                    watch.event.set()

    def wake_all(self) -> None:
        """After a (re)connect: notifications may have been lost meanwhile."""
        self.wake(list(self._watches))

    async def _poll_forever(self) -> None:
        while True:
            await asyncio.sleep(self.poll_s)
            if not self._watches:
                continue
            try:
                await self._poll_once()
            except Exception as exc:  # the poller must outlive a database hiccup
                log.warning("long-poll poller: %s", type(exc).__name__)

    async def _poll_once(self) -> None:
        ids = list(self._watches)
        positions = await run_in_threadpool(self._positions, ids)
        for job_id, position in positions.items():
            for watch in self._watches.get(job_id, ()):
                if position > watch.known_position:
                    watch.event.set()

    def _positions(self, ids: list[str]) -> dict[str, int]:
        return jobs.positions(self._ledger, ids)

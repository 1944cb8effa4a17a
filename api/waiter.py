"""Long-poll wake-ups: who waits for which job, and what wakes them.

A waiter registers a `Watch` *before* it reads the job, so a change that commits between
the read and the wait is never missed. Two sources wake watches, both only hints (a woken
request re-reads the job and decides for itself):

- Postgres: LISTEN on the ledger's NOTIFY channel (sent in the appending transaction);
- every backend: a poll that reads the `ledger_position` of the watched jobs only, one query
  per tick however many requests wait (fast on SQLite, a slow safety net on Postgres). On
  SQLite the writers of every process ring a bell after each commit (`ledger.doorbell`),
  which starts the next tick at once instead of at the end of its interval.

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

from ledger.doorbell import Bell
from ledger.runtime.ledger import Ledger
from ledger.services import jobs

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
        self._bell: Bell | None = None  # while started, where the store has bells
        self._rung = asyncio.Event()
        self._watches: dict[str, set[Watch]] = {}
        self._tasks: list[asyncio.Task[None]] = []
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stopping = False
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
        self._let_go_of_bell()  # of a loop that is gone
        self._loop = loop
        self._rung = asyncio.Event()
        self._stopping = False
        if self._listener is None:
            self._bell = jobs.changes_bell(self._ledger)
            if self._bell is not None:
                loop.add_reader(self._bell.fileno(), self._on_ring)
        self._tasks = [loop.create_task(self._poll_forever(), name="long-poll poller")]
        if self._listener is not None:
            self._tasks.append(loop.create_task(self._listener.run(), name="long-poll listener"))
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._listener.connected.wait(), LISTEN_READY_S)

    async def stop(self) -> None:
        # The flag ends the poller even if a cancel is lost: on Python 3.11, `wait_for` can
        # swallow one that lands as its wait ends (seen: a test's shutdown hung for good).
        self._stopping = True
        self._rung.set()
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._tasks = []
        self._let_go_of_bell()
        self._loop = None

    def _let_go_of_bell(self) -> None:
        if self._bell is None:
            return
        if self._loop is not None:
            with contextlib.suppress(RuntimeError):  # a closed loop has no readers left
                self._loop.remove_reader(self._bell.fileno())
        self._bell.close()
        self._bell = None

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

    def _on_ring(self) -> None:
        if self._bell is not None and self._bell.clear():
            self._rung.set()

    async def _tick(self) -> None:
        """Until the next poll: its interval, or a ring of the bell, whichever comes first."""
        if self._bell is None:
            await asyncio.sleep(self.poll_s)
            return
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._rung.wait(), self.poll_s)
        self._rung.clear()

    async def _poll_forever(self) -> None:
        while not self._stopping:
            await self._tick()
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

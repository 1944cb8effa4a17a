"""One thread that keeps watch over every running tool of the process: the one deadline
mechanism (`services.execute.Executor.start`), for `def` and `async def` tools alike.

A tool used to run on a thread of its own while its job's thread waited for it, renewing the
lease every third of it and giving up at the deadline. That hand-off between two threads cost
a worker more CPU than the job's bookkeeping. Here the tool's thread runs the tool (or waits
for an `async def` tool's task on the tool loop) and then its job's remaining steps; the
watchdog renews the leases of every watched tool on time and, when a tool outlives its
deadline, ends its job through `on_deadline` while the tool goes on (a thread cannot be
killed; a task is cancelled by `on_deadline`). Whichever comes first settles the job: the
tool's return or its deadline; the other learns it lost and does nothing.
"""

from __future__ import annotations

import functools
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from ledger.runtime.batching import DaemonThreads


@dataclass(slots=True, eq=False)  # eq=False: kept in a set, one entry per watch
class Watch:
    job_id: str
    attempt: int
    deadline: float
    beat_at: float
    on_deadline: Callable[[], None]
    settled: bool = False


class Watchdog:
    def __init__(
        self, beat_every_s: float, beat: Callable[[str, int], None], threads: DaemonThreads
    ) -> None:
        self._beat_every = beat_every_s
        self._beat = beat  # renews one lease (blocking: run on `threads`, never here)
        self._threads = threads
        self._cond = threading.Condition()
        self._watched: set[Watch] = set()
        self._wakes_at = float("inf")  # when the watchdog's thread will next look
        self._thread: threading.Thread | None = None

    def watch(
        self, job_id: str, attempt: int, timeout_s: float, on_deadline: Callable[[], None]
    ) -> Watch:
        start = time.monotonic()
        watch = Watch(job_id, attempt, start + timeout_s, start + self._beat_every, on_deadline)
        with self._cond:
            self._watched.add(watch)
            if self._thread is None:
                self._thread = threading.Thread(target=self._serve, name="watchdog", daemon=True)
                self._thread.start()
            # Woken only when this watch is due before the watchdog's next look: a busy
            # worker adds jobs far more often than any of them is due.
            if min(watch.deadline, watch.beat_at) < self._wakes_at:
                self._cond.notify()
        return watch

    def settle(self, watch: Watch) -> bool:
        """The tool returned: True when it did so before its deadline settled the job."""
        with self._cond:
            if watch.settled:
                return False
            watch.settled = True
            self._watched.discard(watch)
            return True

    def _serve(self) -> None:
        while True:
            expired: list[Watch] = []
            beats: list[tuple[str, int]] = []
            with self._cond:
                moment = time.monotonic()
                for watch in list(self._watched):
                    if moment >= watch.deadline:
                        watch.settled = True
                        self._watched.discard(watch)
                        expired.append(watch)
                    elif moment >= watch.beat_at:
                        beats.append((watch.job_id, watch.attempt))
                        watch.beat_at = moment + self._beat_every
                due = [min(w.deadline, w.beat_at) for w in self._watched]
                self._wakes_at = min(due, default=float("inf"))
                if not expired and not beats:
                    wait = self._wakes_at - moment
                    self._cond.wait(None if wait == float("inf") else max(wait, 0.0))
                    continue
            for watch in expired:
                self._threads.run(watch.on_deadline)
            for job_id, attempt in beats:
                self._threads.run(functools.partial(self._beat, job_id, attempt))

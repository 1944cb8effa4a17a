"""Group commit: callers on many threads each hand in one item and wait for its own result;
the items that gather while a flush is in flight go out together in the next one.

Nobody waits for a timer: a caller that finds no flush in flight flushes at once (alone, when
the service is quiet). Under load, each flush takes everything that queued meanwhile, so one
transaction and one commit serve many callers, and each caller is answered only once its own
item's flush has returned (for a store write: once it is durable).
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Sequence
from typing import Generic, TypeVar

T = TypeVar("T")
R = TypeVar("R")


class _Ticket(Generic[T, R]):
    """One caller's item. `wake` is a latch: a lock taken at creation, released to wake the
    caller blocked acquiring it. A lock costs a fraction of an Event (whose Condition runs in
    Python at each wait and set), and a ticket is woken at most once per wait: to lead, or
    once its flush is done; the leader's own ticket is released once, unwaited."""

    __slots__ = ("done", "error", "item", "lead", "result", "wake")

    def __init__(self, item: T) -> None:
        self.item = item
        self.done = False
        self.lead = False  # woken to lead the next flush, not because its own is done
        self.result: R | None = None
        self.error: BaseException | None = None
        self.wake = threading.Lock()
        self.wake.acquire()


class GroupCommit(Generic[T, R]):
    def __init__(self, flush: Callable[[list[T]], Sequence[R]], max_batch: int = 64) -> None:
        self._flush = flush
        self._max_batch = max_batch
        self._lock = threading.Lock()
        self._queue: list[_Ticket[T, R]] = []
        self._busy = False  # a flush is in flight, or its successor has been named
        self.flushes = 0  # how many flushes ran (a measure of the batching)

    def submit(self, item: T) -> R:
        ticket: _Ticket[T, R] = _Ticket(item)
        with self._lock:
            self._queue.append(ticket)
            leads = not self._busy
            self._busy = True
        if not leads:
            ticket.wake.acquire()
            if ticket.done:
                return self._answer(ticket)
        # Leading: flush what waits (this ticket first), then hand the lead on. Only the
        # callers concerned are woken: no herd of waiters rechecking a shared condition.
        with self._lock:
            batch = self._queue[: self._max_batch]
            del self._queue[: self._max_batch]
        self._run(batch)
        with self._lock:
            self.flushes += 1
            if self._queue:
                successor = self._queue[0]
                successor.lead = True
                successor.wake.release()
            else:
                self._busy = False
        return self._answer(ticket)

    def _run(self, batch: list[_Ticket[T, R]]) -> None:
        try:
            results = self._flush([t.item for t in batch])
            if len(results) != len(batch):
                raise RuntimeError(f"a flush of {len(batch)} items answered {len(results)}")
        except BaseException as exc:  # every caller of the batch learns it, nobody hangs
            for ticket in batch:
                ticket.error = exc
        else:
            for ticket, result in zip(batch, results, strict=True):
                ticket.result = result
        for ticket in batch:
            ticket.done = True
            ticket.wake.release()

    @staticmethod
    def _answer(ticket: _Ticket[T, R]) -> R:
        if ticket.error is not None:
            raise ticket.error
        return ticket.result  # type: ignore[return-value]


class DaemonThreads:
    """Threads kept between jobs to run tools (starting a thread per job costs more than the
    job's bookkeeping). Daemon threads, as before: a tool past its deadline cannot be killed,
    and must not keep the process from exiting. The pool grows while every thread is busy
    (a stuck tool holds its thread) and shrinks back after `idle_s` without work."""

    def __init__(self, name: str = "tool", idle_s: float = 60.0) -> None:
        self._name = name
        self._idle_s = idle_s
        self._work: queue.SimpleQueue[Callable[[], None]] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._idle = 0
        self._count = 0

    def run(self, task: Callable[[], None]) -> None:
        with self._lock:
            if self._idle:
                self._idle -= 1
            else:
                self._count += 1
                name = f"{self._name}-{self._count}"
                threading.Thread(target=self._serve, name=name, daemon=True).start()
        self._work.put(task)

    def _serve(self) -> None:
        while True:
            try:
                task = self._work.get(timeout=self._idle_s)
            except queue.Empty:
                with self._lock:
                    if self._idle:  # nobody counted on this thread: let it go
                        self._idle -= 1
                        self._count -= 1
                        return
                continue
            task()  # the task reports its own outcome and errors (see Executor)
            with self._lock:
                self._idle += 1

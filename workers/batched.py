"""Batched execution on a threads worker: the execute task's messages are claimed in groups
by the worker process itself, not handed to Celery's pool one task at a time.

Celery still receives every message (its consumer, prefetch, `inspect`, signals and shutdown
are as usual); this task's strategy hands the job id to a `BatchedRunner` instead of building
a pool request. The runner claims every delivery it has room for in one transaction (the
brake re-checked under the shared brakes lock inside it, the leases in it; while deliveries
keep coming it lets a few more arrive first, see LINGER_S), starts the claimed
tools at once, and records each outcome through the process's group commit as the tool
finishes, so a slow tool holds nobody else's outcome back. Each message is acked only after
its job's outcome (or its halt, or the decision to skip it) is committed: a worker killed
between the claim's commit and the ack leaves messages the broker redelivers, and their claim
finds the jobs running or closed and skips them (the reconciler judges a lost attempt).

A prefork or solo worker keeps Celery's own strategy: each pool process runs one job at a time.
A delayed message (a retry's backoff) also takes Celery's own way, through its timer and pool.

With task events on (OUTCOMES_TASK_EVENTS=1) the runner sends, for each delivery, the events
Celery's request would (workers/task_events.py): received, started once claimed, and the one
that matches its outcome. With them off it holds no events object: nothing is built or sent.
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any

from celery import bootsteps
from celery.concurrency.thread import TaskPool as ThreadsPool
from celery.worker import state
from celery.worker.strategy import default as celery_strategy

from ledger.errors import OutcomeUnrecordedError, StorageUnavailableError
from ledger.services.execute import Execution, Executor
from ledger.services.work import Claim, ClaimResult
from workers.app import EXECUTE_TASK
from workers.delivery import Delivery
from workers.task_events import CLAIM_FAILED, TaskEvents, failure_text, settled_text

__all__ = [
    "GATHER_S",
    "LINGER_S",
    "MAX_BACKOFF_S",
    "RUNNERS",
    "STEADY_S",
    "BatchedRunner",
    "BatchedStop",
    "Delivery",
    "strategy",
]

log = logging.getLogger(__name__)

MAX_BACKOFF_S = 30.0  # between claim attempts while the ledger is unavailable
# How long a claim waits for running tools to return when more deliveries wait than there is
# room for: a claim costs about the same for one job as for sixteen, and without the wait the
# claims thread took only the slots of the tools that had just returned, about half of them.
GATHER_S = 0.005
# How long a claim with room to spare waits for more deliveries while they keep coming (the
# last two arrived less than STEADY_S apart): one producer's jobs arrive a couple of
# milliseconds apart, and claiming each alone cost a transaction per job. An agent that waits
# for each call's outcome before the next sends one every ten milliseconds or more: nothing
# follows its job, so its claim never waits (it used to, 5 ms on every call).
LINGER_S = 0.005
STEADY_S = 0.005


class BatchedRunner:
    """Claims what has arrived, up to the free slots, in one transaction; runs each claimed
    job on a thread of its own; acks each message once its job is settled.

    A slot is a tool running (or about to, once claimed): it is free again as soon as the tool
    returns, while its outcome is still being recorded. Recording takes a group commit's
    latency, and holding the slot through it left the tools' concurrency mostly idle. What is
    taken and not yet acked is bounded by the consumer's prefetch (the broker's unacked limit).
    """

    def __init__(
        self,
        executor: Callable[[], Executor],
        slots: int,
        gather_s: float = GATHER_S,
        linger_s: float = LINGER_S,
        steady_s: float = STEADY_S,
        events: TaskEvents | None = None,
    ) -> None:
        self._make_executor = executor  # called once, in the worker process, at the first claim
        self._made: Executor | None = None
        self._slots = max(1, slots)
        self._gather_s = gather_s
        self._linger_s = linger_s
        self._steady_s = steady_s
        self._last_arrival = float("-inf")  # time.monotonic() of the last delivery
        self._gap = float("inf")  # seconds between the last two deliveries
        self._cond = threading.Condition()
        self._inbox: deque[Delivery] = deque()
        self._busy = 0  # deliveries taken from the inbox and not yet acked
        self._running = 0  # of which: holding a slot (claiming, or their tool running)
        self._stopping = False
        self._thread: threading.Thread | None = None
        self._events = events  # None: task events are off

    def deliver(self, delivery: Delivery) -> None:
        if self._events is not None:
            self._events.received(delivery.id, delivery.job_id, delivery.message.headers)
        with self._cond:
            if self._thread is None:
                self._thread = threading.Thread(target=self._serve, name="claims", daemon=True)
                self._thread.start()
            self._inbox.append(delivery)
            arrived = time.monotonic()
            self._gap, self._last_arrival = arrived - self._last_arrival, arrived
            self._cond.notify_all()

    def stop(self, timeout_s: float | None = None) -> bool:
        """Claim nothing more; wait for the claimed jobs to be recorded and acked. What was
        received but not claimed stays unacked: the broker gives it to another worker (or
        to this one, once its consumer restarts with `resume`)."""
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
            while self._busy:
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    return False
                self._cond.wait(left)
            self._inbox.clear()
            thread, self._thread = self._thread, None
        if thread is not None:
            thread.join()
        return True

    @property
    def events(self) -> TaskEvents | None:
        return self._events

    def resume(self) -> None:
        with self._cond:
            self._stopping = False

    @property
    def busy(self) -> int:
        with self._cond:
            return self._busy

    def _serve(self) -> None:
        while True:
            batch = self._take()
            if batch is None:
                return
            for delivery in batch:
                delivery.time_start = time.time()
                state.task_accepted(delivery)
            claims = self._claim(batch)
            if claims is None:  # stopping while the ledger was down: nothing was claimed,
                self._release(batch, ack=False)  # so the broker keeps the messages
                continue
            executor = self._executor()
            for delivery, claim in zip(batch, claims, strict=True):
                if claim is None:
                    self._unclaimed(delivery)
                    continue
                if claim.result is ClaimResult.CLAIMED and self._events is not None:
                    self._events.started(delivery.id)
                # The one way a job runs: a claim that runs nothing settles at once, here;
                # a tool runs on the executor's kept threads, which settle it when it ends.
                executor.start(
                    delivery.job_id,
                    claim,
                    functools.partial(self._free_slot, delivery),
                    functools.partial(self._settled, delivery),
                )

    def _take(self) -> list[Delivery] | None:
        with self._cond:
            while not self._stopping and not (self._inbox and self._running < self._slots):
                self._cond.wait()
            if self._running and len(self._inbox) > self._slots - self._running:
                # More waits than there is room for, and tools are running: let them return
                # for a moment, so that this claim takes a fuller batch.
                self._cond.wait_for(self._room_for_the_inbox, timeout=self._gather_s)
            elif self._gap < self._steady_s:
                # Room to spare while deliveries keep coming: let a few more arrive, so that
                # one claim (one transaction, one commit) serves them.
                self._cond.wait_for(self._inbox_fills_the_room, timeout=self._linger_s)
            if self._stopping:
                return None
            room = min(self._slots - self._running, len(self._inbox))
            self._busy += room
            self._running += room
            batch = [self._inbox.popleft() for _ in range(room)]
            for delivery in batch:
                delivery.holds_slot = True
            return batch

    def _room_for_the_inbox(self) -> bool:
        """Every slot is free, or enough of them for what waits (or we stop)."""
        room = self._slots - self._running
        return self._stopping or room == self._slots or len(self._inbox) <= room

    def _inbox_fills_the_room(self) -> bool:
        return self._stopping or len(self._inbox) >= self._slots - self._running

    def _claim(self, batch: list[Delivery]) -> list[Claim | None] | None:
        """The batch's claims, in order; None for a delivery whose claim failed (logged and
        reported as a rejected delivery, its message acked, as Celery acks a failed late-ack
        task: the reconciler sends another). None for all while the ledger stays down and we
        stop."""
        executor = self._executor()  # the one claims thread makes it, before any job runs
        delay = 0.05
        while True:
            try:
                return list(executor.claim_batch([d.job_id for d in batch]))
            except StorageUnavailableError as exc:
                # Fail closed: nothing starts without its brake check. The messages stay
                # unacked meanwhile (the broker holds them for this worker).
                log.warning(
                    "claiming %d job(s): ledger unavailable (%s); retrying", len(batch), exc
                )
            except Exception as exc:
                if len(batch) == 1:
                    log.exception("job %s: claim failed", batch[0].job_id)
                    executor.report_rejected(batch[0].job_id, exc)
                    return [None]
                # One bad delivery must not cost the others: each alone.
                return [self._claim_one(executor, d) for d in batch]
            with self._cond:
                if self._cond.wait_for(lambda: self._stopping, timeout=delay):
                    return None
            delay = min(delay * 2, MAX_BACKOFF_S)

    def _executor(self) -> Executor:
        # Looked up once: the process's resources read the settings at every call.
        if self._made is None:
            self._made = self._make_executor()
        return self._made

    @staticmethod
    def _claim_one(executor: Executor, delivery: Delivery) -> Claim | None:
        try:
            return executor.claim_batch([delivery.job_id])[0]
        except Exception as exc:
            log.exception("job %s: claim failed", delivery.job_id)
            executor.report_rejected(delivery.job_id, exc)
            return None

    def _unclaimed(self, delivery: Delivery) -> None:
        """Its claim failed (logged, reported as a rejected delivery): the message goes."""
        if self._events is not None:
            self._events.settled(delivery.id, CLAIM_FAILED, None)
        self._release([delivery])

    def _settled(self, delivery: Delivery, result: Execution | Exception) -> None:
        """The job is settled (its outcome recorded, or why not logged): the message goes."""
        took = time.time() - (delivery.time_start or time.time())
        try:
            if isinstance(result, Exception):
                if isinstance(result, OutcomeUnrecordedError):
                    log.error("%s", result)  # the lease lapses; the reconciler records the rest
                else:
                    log.error("job %s: execution failed", delivery.job_id, exc_info=result)
                if self._events is not None:
                    self._events.settled(delivery.id, failure_text(result), took)
            else:
                log.info(
                    "job %s: %s %s", delivery.job_id, result.claim.value, result.event_type or ""
                )
                logged = log.isEnabledFor(logging.INFO)
                if logged or self._events is not None:
                    text = settled_text(result)
                    if self._events is not None:
                        self._events.settled(delivery.id, text, took)
                    # Celery's own line for a handled task (as the task's own way logs it, with
                    # its returned words), which operators' log searches expect.
                    log.info(
                        "Task %s[%s] succeeded in %.6fs: %r", EXECUTE_TASK, delivery.id, took, text
                    )
        finally:
            self._release([delivery])

    def _free_slot(self, delivery: Delivery) -> None:
        with self._cond:
            if self._unhold(delivery):
                self._cond.notify_all()

    def _unhold(self, delivery: Delivery) -> bool:
        """Give back the delivery's slot if it still holds one (called holding `_cond`)."""
        if not delivery.holds_slot:
            return False
        delivery.holds_slot = False
        self._running -= 1
        return True

    def _release(self, deliveries: list[Delivery], ack: bool = True) -> None:
        with self._cond:
            direct = self._stopping
        for delivery in deliveries:
            if ack:
                try:
                    delivery.ack(direct)
                except Exception as exc:  # never the claims thread's end: the job is settled
                    log.warning(
                        "job %s: its message could not be acked (%s); a redelivery's claim "
                        "skips it",
                        delivery.job_id,
                        exc,
                    )
            state.task_ready(delivery)
        with self._cond:
            for delivery in deliveries:
                self._unhold(delivery)
            self._busy -= len(deliveries)
            self._cond.notify_all()


RUNNERS: dict[int, BatchedRunner] = {}  # by id of the consumer, for the stop step


def strategy(task: Any, app: Any, consumer: Any, **options: Any) -> Callable[..., Any]:
    """Celery's task strategy hook (`Task.Strategy`): batched on a threads pool."""
    fallback: Callable[..., Any] = celery_strategy(task, app, consumer, **options)
    if not isinstance(consumer.pool, ThreadsPool):
        return fallback
    from workers import resources  # the process's ledger, dispatcher and executor

    # The strategy is made again at each consumer restart; its runner is kept.
    runner = RUNNERS.get(id(consumer))
    if runner is None:
        events = TaskEvents(consumer) if app.conf.worker_send_task_events else None
        runner = BatchedRunner(resources.executor, consumer.pool.limit, events=events)
        RUNNERS[id(consumer)] = runner
    hostname, errors = consumer.hostname, consumer.connection_errors

    def handle(message: Any, body: Any, ack: Any, reject: Any, callbacks: Any, **kw: Any) -> Any:
        headers = message.headers
        if headers.get("eta") or body is not None:  # delayed, or an old protocol: Celery's way
            return fallback(message, body, ack, reject, callbacks, **kw)
        try:
            args = message.decode()[0]
            job_id = args[0]
            if not isinstance(job_id, str):
                raise TypeError(type(job_id).__name__)
        except Exception as exc:  # not a message this task can run: never requeue it
            log.error("dropping a malformed %s message: %s", EXECUTE_TASK, exc)
            reject(requeue=False)
            return None
        runner.deliver(Delivery(message, job_id, ack, hostname, errors))
        return None

    return handle


class BatchedStop(bootsteps.StartStopStep):  # type: ignore[misc]  # Celery is untyped
    """A consumer step: its stop (a warm shutdown, or a consumer restarting after a lost
    connection) waits for the runner's claimed jobs, as Celery waits for its pool's tasks."""

    requires = ("celery.worker.consumer.tasks:Tasks",)

    def start(self, consumer: Any) -> None:
        runner = RUNNERS.get(id(consumer))
        if runner is not None:
            runner.resume()

    def stop(self, consumer: Any) -> None:
        runner = RUNNERS.get(id(consumer))
        if runner is None:
            return
        if busy := runner.busy:
            log.info("waiting for %d batched job(s) to finish", busy)
        runner.stop()
        if runner.events is not None:  # the jobs' last events, before the loop that sends them ends
            runner.events.flush()

"""The outbox: every accepted job's message reaches the broker, confirmed, however the
process that decided it fares.

The decision is the outbox record: a job waiting for a worker (queued, or retrying) needs a
message for its current wait, and the broker's confirmation of that message is recorded
(`dispatches`, operational state like leases). What is accepted and not confirmed is what is
left to publish:

- **In the deciding process** (`send`): the job id goes to a publishing thread at once, so
  the caller's answer never waits for the broker; confirmations are recorded in groups. A
  publish that fails (the broker away) is tried again, from memory, every half second or so,
  so a job is published within about a second of the broker's return.
- **In the reconciler** (`relay_once`): every waiting job with no confirmation for its current
  wait, last changed more than `relay_after_s` ago, is published again. That covers a process
  that died between its commit and its publish, or before it recorded the confirmation. It
  needs no leader: a duplicate message is harmless (a worker's claim is version-checked).

A confirmed message is trusted: nothing here publishes again a job whose current message was
confirmed. Sending a confirmed job again takes evidence that its message is gone, and is a
recorded re-dispatch (the reconciler's, `ledger.reconcile_rules`).

With a per-account dispatch window (`OUTCOMES_ACCOUNT_WINDOW`, `services.dispatch_window`),
a new job whose account already has that many messages in the broker is left to the ledger,
unpublished; the workers top the window up as the account's jobs start (`top_up`), and the
relay tops up every account instead of publishing everything unconfirmed.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from datetime import timedelta

from ledger.clock import now
from ledger.dispatch import Dispatcher, QueueMarker, dispatch_all
from ledger.job_view import JobView
from ledger.queueing import Confirmation
from ledger.reconcile_rules import RELAY_AFTER_S
from ledger.runtime import dispatch_window, queue_epoch
from ledger.runtime.backlog import BacklogGauge
from ledger.runtime.ledger import Ledger
from ledger.runtime.outbox_records import ConfirmationRecords

__all__ = ["MAX_BATCH", "MAX_HELD", "RELAY_LIMIT", "RETRY_S", "Outbox", "Sent", "outbox_for"]

from ledger.runtime.outbox_messages import (
    OutboxJob,
    Sent,
    dispatch_spans,
    end_dispatch_spans,
    first_reason,
    job_of,
    retry_delay,
)

log = logging.getLogger(__name__)

RETRY_S = (0.25, 0.5, 1.0)  # between rounds of what the broker did not take, as it stays away
MAX_BATCH = 500  # messages per publish (their confirms are awaited together)
# Jobs (and confirmations) kept in memory for another try; beyond, the reconciler's relay.
MAX_HELD = 100_000
RELAY_LIMIT = 1000


class Outbox:
    """The process's outbox over `dispatcher`. `background=False` publishes inline, in the
    caller's thread, and records the confirmation before `send` returns (the CLI, tests)."""

    def __init__(
        self,
        ledger: Ledger,
        dispatcher: Dispatcher,
        *,
        background: bool = True,
        publishers: int = 2,
    ) -> None:
        self.ledger = ledger
        self.dispatcher = dispatcher
        self.queue = dispatcher.queue if isinstance(dispatcher, QueueMarker) else None
        self._background = background
        self._publishers = publishers
        self._cond = threading.Condition()
        self._ready: deque[OutboxJob] = deque()
        self._later: list[OutboxJob] = []  # failed publishes, to try again
        self._failures = 0  # publishes failed in a row: the broker is away, not one message
        self._retry_at = 0.0  # time.monotonic() of the next try of what failed
        self._in_flight = 0
        self._stopping = False
        self._threads: list[threading.Thread] = []
        self._epochs = queue_epoch.CachedEpoch(ledger, dispatcher)
        # What submit refuses by, sampled in the background: an inline outbox (a command, a
        # test) lives for one submit, too short to measure a drain rate, so it has none.
        self.backlog = BacklogGauge(ledger) if background else None
        self._records = ConfirmationRecords(ledger, MAX_HELD, self.backlog)
        # Batches are admitted in the order they were taken (a window's first N are the
        # account's first N, whichever thread publishes them): a ticket each, and the turn.
        self._tickets = 0
        self._turn = 0
        self._top_ups: dispatch_window.TopUps | None = None

    # --- sending ----------------------------------------------------------------------------

    def send(self, view: JobView, delay_s: float = 0.0) -> None:
        """Hand this waiting job's message to the broker (never raises for the broker)."""
        self.send_version(view.job_id, view.stream_version, delay_s, view.tool, view)

    def send_version(
        self,
        job_id: str,
        version: int,
        delay_s: float = 0.0,
        tool: str = "",
        view: JobView | None = None,
    ) -> None:
        """`send` for the job's wait that began at stream version `version` (`view`: the
        job's, for its trace and, with a dispatch window, the account whose window the
        message counts in: it may be left to the ledger)."""
        job = OutboxJob(job_id, version, time.monotonic() + max(0.0, delay_s), tool)
        if view is not None:
            job.account, job.trace = view.account, view.trace
        if not self._background:
            self._send_inline(job)
            return
        with self._cond:
            self._start_threads()
            self._ready.append(job)
            self._cond.notify()

    def send_now(self, view: JobView, delay_s: float = 0.0) -> Sent:
        """Publish in this thread and record the confirmation before returning; a message the
        broker did not take is left to the reconciler's relay (not kept here)."""
        due = time.monotonic() + max(0.0, delay_s)
        return self._send_inline(job_of(view, due))

    def _send_inline(self, job: OutboxJob) -> Sent:
        sent = self._publish([job], again=False)
        self._records.record_now()
        return sent

    def flush(self, timeout_s: float = 10.0) -> bool:
        """Wait until everything sent was published (or failed) and its confirmation
        recorded; False on timeout. For tests and an orderly shutdown."""
        deadline = time.monotonic() + timeout_s
        while True:
            with self._cond:
                idle = not self._ready and not self._in_flight
            if idle:
                self._records.record_now()
                with self._cond:
                    published = not (self._ready or self._in_flight)
                if published and self._records.idle:
                    return True
            if time.monotonic() > deadline:
                return False
            time.sleep(0.005)

    def pending(self) -> dict[str, int]:
        """What is not yet published or recorded, by where it waits (a stalled flush's report)."""
        unrecorded, recording = self._records.counts()
        with self._cond:
            return {
                "ready": len(self._ready),
                "in_flight": self._in_flight,
                "later": len(self._later),
                "confirmed_unrecorded": unrecorded,
                "recording": recording,
                "failures_in_a_row": self._failures,
            }

    @property
    def held(self) -> int:
        """Jobs in memory waiting for another try (the broker did not take them)."""
        with self._cond:
            return len(self._later) + len(self._ready)

    def close(self, timeout_s: float = 5.0) -> None:
        """Stop publishing; record what was confirmed. What was not published stays for the
        reconciler's relay (the ledger holds the decisions)."""
        if self._top_ups is not None:
            self._top_ups.close(timeout_s)
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
            threads, self._threads = self._threads, []
        self._records.stop()
        for thread in threads:
            thread.join(timeout_s)
        self._records.record_now()

    # --- the reconciler's relay ------------------------------------------------------------

    def relay_once(self, relay_after_s: float = RELAY_AFTER_S, limit: int = RELAY_LIMIT) -> Sent:
        """Publish, here and now, the waiting jobs whose current message the broker has not
        confirmed and that nobody changed for `relay_after_s`; record what was confirmed."""
        window = self.ledger.limits.window
        if window:  # every account's window topped up, instead of everything unconfirmed
            self._epochs.current()  # read (or begun) here, never inside a top-up's transaction
            topped = dispatch_window.top_up_all(self.ledger, window, self._confirm_now)
            if topped:
                log.info("relay: topped up the dispatch windows with %d job(s)", len(topped))
            return Sent(confirmed=topped)
        moment = now()
        with self.ledger.store.reading() as reads:
            views = reads.undispatched_jobs(moment - timedelta(seconds=relay_after_s), limit)
        clock = time.monotonic()
        jobs = [job_of(v, clock + retry_delay(v, moment)) for v in views]
        sent = self._publish(jobs, again=False)
        self._records.record_now()
        if sent.confirmed:
            log.info("relay: published %d job(s) no dispatch had confirmed", len(sent.confirmed))
        return sent

    # --- the dispatch window ----------------------------------------------------------------

    def top_up(self, accounts: Sequence[str]) -> None:
        """These accounts' jobs just started: fill their windows again, on a thread of this
        outbox (never in the caller's). Nothing without a window."""
        window = self.ledger.limits.window
        if not window or not accounts:
            return
        if self._top_ups is None:
            with self._cond:
                if self._top_ups is None:
                    self._top_ups = dispatch_window.TopUps(
                        self.ledger, window, self._confirm_now, self._epochs.current
                    )
        self._top_ups.request(accounts)

    def _confirm_now(self, views: Sequence[JobView]) -> list[Confirmation]:
        """Publish these jobs here; the confirmations, for the caller to record (a top-up
        records them in its own transaction, under the account's lock). Under the epoch the
        caller read before that transaction: beginning one here would be a second writer
        inside it (SQLite's one writer would wait on itself)."""
        epoch = self._epochs.last
        moment, clock = now(), time.monotonic()
        jobs = [job_of(v, clock + retry_delay(v, moment)) for v in views]
        fates = dispatch_all(self.dispatcher, [job.message(clock) for job in jobs])
        confirmed_at = now()
        return [
            Confirmation(job.job_id, job.version, epoch, confirmed_at)
            for job, fate in zip(jobs, fates, strict=True)
            if fate is None
        ]

    def _admitted(self, batch: list[OutboxJob], ticket: int) -> list[OutboxJob]:
        """The batch's messages that fit their accounts' windows; the rest stay accepted in
        the ledger, unpublished, for a top-up (none is dropped that has no record there: a
        job's current wait is unconfirmed until a message of it is confirmed). It waits for
        the batches taken before it (lower tickets) to be admitted, and lets the next one go
        before it publishes."""
        window = self.ledger.limits.window
        if not window:
            return batch
        with self._cond:
            self._cond.wait_for(lambda: self._turn >= ticket or self._stopping, timeout=30)
        try:
            return self._admit(batch, window)
        finally:
            with self._cond:
                self._turn = max(self._turn, ticket + 1)
                self._cond.notify_all()

    def _admit(self, batch: list[OutboxJob], window: int) -> list[OutboxJob]:
        records = self._records
        with records.admitting:
            records.record_now()  # so that the count sees this process's own
            pending = records.unrecorded_by_account()
            accounts = [job.account for job in batch]
            fits = dispatch_window.admit(self.ledger, accounts, window, pending)
            admitted = [job for job, fit in zip(batch, fits, strict=True) if fit]
            records.admitted((job.job_id, job.account) for job in admitted)
        return admitted

    # --- the publishing threads ------------------------------------------------------------

    def _start_threads(self) -> None:
        if self._threads or self._stopping:
            return
        for index in range(self._publishers):
            self._spawn(self._publish_loop, f"outbox-{index}")
        self._spawn(self._records.run, "outbox-record")

    def _spawn(self, target: Callable[[], None], name: str) -> None:
        thread = threading.Thread(target=target, name=name, daemon=True)
        thread.start()
        self._threads.append(thread)

    def _publish_loop(self) -> None:
        while True:
            with self._cond:
                batch = self._next_batch()
                while batch is None:
                    if self._stopping:
                        return
                    self._cond.wait(self._until_next_try())
                    batch = self._next_batch()
                self._in_flight += 1
                ticket, self._tickets = self._tickets, self._tickets + 1
            try:
                self._publish(self._admitted(batch, ticket))
            except Exception:  # a bug, not the broker: keep the jobs and the thread
                log.exception("outbox: publishing %d job(s) failed", len(batch))
                self._hold(batch)
            finally:
                with self._cond:
                    self._in_flight -= 1
                    self._turn = max(self._turn, ticket + 1)  # an admission that failed too
                    # Who waits on it: the next batch's admission (with a window), or work
                    # this thread's success lets go now (held through an outage). Otherwise
                    # waking the idle publishers only sends them back to sleep.
                    if self.ledger.limits.window or self._later or self._ready:
                        self._cond.notify_all()

    def _next_batch(self) -> list[OutboxJob] | None:
        """Called holding `_cond`: the jobs to publish now, or None. While the broker refuses,
        what is held is tried again together (one connection attempt a round, not one a job),
        and new jobs wait with it rather than hammering a broker that is away."""
        moment = time.monotonic()
        if self._failures and moment < self._retry_at:
            return None
        due, self._later = self._later[:MAX_BATCH], self._later[MAX_BATCH:]
        while self._ready and len(due) < MAX_BATCH:
            due.append(self._ready.popleft())
        return due or None

    def _until_next_try(self) -> float | None:
        if not self._failures or not (self._later or self._ready):
            return None
        return max(0.0, self._retry_at - time.monotonic())

    def _publish(self, jobs: Sequence[OutboxJob], again: bool = True) -> Sent:
        """Publish `jobs` and note what the broker confirmed; with `again`, hold what it did
        not for another try (the background's way)."""
        sent = Sent()
        if not jobs:
            return sent
        epoch = self._epochs.current()
        spans = dispatch_spans(jobs)
        moment = time.monotonic()
        fates = dispatch_all(self.dispatcher, [job.message(moment) for job in jobs])
        if spans:
            end_dispatch_spans(spans, fates)
        confirmed_at = now()
        failed: list[OutboxJob] = []
        confirmations: list[Confirmation] = []
        for job, fate in zip(jobs, fates, strict=True):
            if fate is None:
                sent.confirmed.append(job.job_id)
                confirmations.append(Confirmation(job.job_id, job.version, epoch, confirmed_at))
            else:
                sent.failed.append(job.job_id)
                failed.append(job)
        self._records.add(confirmations)
        with self._cond:
            was_failing = self._failures > 0
            if again:
                self._failures = self._failures + 1 if not sent.confirmed else 0
        if failed and (not again or not was_failing):  # told once an outage, not every try
            log.warning(
                "outbox: %d of %d job(s) not confirmed by the broker (%s); trying again",
                len(failed),
                len(jobs),
                first_reason(fates),
            )
        if failed and again:
            self._hold(failed)
        elif again and was_failing and sent.confirmed:
            log.info("outbox: the broker takes messages again")
        return sent

    def _hold(self, jobs: Sequence[OutboxJob]) -> None:
        moment = time.monotonic()
        with self._cond:
            failures = max(1, self._failures)
            self._failures = failures
            self._retry_at = moment + RETRY_S[min(failures, len(RETRY_S)) - 1]
            self._later.extend(jobs)
            if len(self._later) > MAX_HELD:  # the oldest are the reconciler's relay's now
                self._later = self._later[-MAX_HELD:]
            self._cond.notify_all()

    def forget_epoch(self) -> None:
        """Read the queue's epoch again before the next publish (it changed)."""
        self._epochs.forget()


def outbox_for(ledger: Ledger, sender: Dispatcher | Outbox | None) -> Outbox | None:
    """The outbox to send through: the process's own, or an inline one over a bare
    dispatcher (a command, a test)."""
    if sender is None or isinstance(sender, Outbox):
        return sender
    return Outbox(ledger, sender, background=False)

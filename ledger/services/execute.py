"""Executing one job: claim it, run its tool under a deadline while renewing the lease, record
exactly one outcome, and dispatch the next attempt when a retry was scheduled. Knows nothing
of Celery: the worker adapter calls `Executor.execute` with a job id."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from pydantic import BaseModel

from ledger import event_log
from ledger.brakes import brake_error
from ledger.classify import failure_event
from ledger.clock import now
from ledger.codes import Code, Status
from ledger.dispatch import Dispatcher
from ledger.errors import (
    BrakeEngaged,
    ContentionError,
    DeadlineExceeded,
    DispatchError,
    LedgerError,
    OutcomeUnrecordedError,
    StorageUnavailableError,
)
from ledger.events import NewEvent, Payload, WorkHalted, WorkRetryScheduled
from ledger.fairness import DEFER_S
from ledger.job_fold import status_after
from ledger.job_view import JobView
from ledger.runtime.batching import DaemonThreads, GroupCommit
from ledger.runtime.ledger import Ledger
from ledger.runtime.outbox import Outbox, outbox_for
from ledger.runtime.tool_loop import SHARED, ToolLoop, awaited
from ledger.runtime.watchdog import Watchdog
from ledger.services import tool_call
from ledger.services.not_run import (
    brake_unreadable,
    missing_tool,
)
from ledger.services.tool_call import Superseded, attempt_of
from ledger.services.work import (
    Claim,
    ClaimRequest,
    ClaimResult,
    brakes_holding,
    claim_many,
    record_outcome,
    renew_leases,
)
from ledger.telemetry import telemetry
from ledger.tools import ToolContext, ToolSpec, get_tool
from ledger.tracing import job_attributes, tracer

log = logging.getLogger(__name__)

# How long a worker keeps retrying the outcome write (same event id) through a database
# outage before it gives up and leaves the job to the reconciler.
OUTCOME_WRITE_BUDGET_S = 600.0


def _nothing() -> None:
    pass


@dataclass(frozen=True)
class Execution:
    job_id: str
    claim: ClaimResult
    event_type: str | None = None  # what was recorded for this attempt
    late: bool = False
    retry_in_s: float | None = None  # a retry was scheduled and dispatched this far ahead
    # The job's status and code after this delivery, as far as it knows (what it recorded, or
    # what a claim that ran nothing found), and why such a claim ran nothing: for the worker's
    # task events (Flower). None after a late outcome: the job had been closed by then.
    status: Status | None = None
    code: Code | None = None
    reason: str = ""


class Executor:
    def __init__(
        self,
        ledger: Ledger,
        worker_id: str,
        dispatcher: Dispatcher | Outbox | None = None,
        lease_s: float = 30.0,
        loop: ToolLoop = SHARED,
    ) -> None:
        self.ledger = ledger
        self.worker_id = worker_id
        # Retries go out through it; None: the reconciler's relay publishes them.
        self.outbox = outbox_for(ledger, dispatcher)
        self.lease_s = lease_s
        self._threads = DaemonThreads("tool")
        beat_s = lease_s / 3  # a running tool's lease is renewed three times a lease
        self._watchdog = Watchdog(beat_s, self._heartbeat, self._threads)
        # Tools run on these threads, async ones on `loop` (see ledger/runtime/tool_loop.py
        # for why one loop); the watchdog alone keeps their deadlines and renews their leases.
        self._loop = loop
        # Claims from this process's task threads share one transaction per group.
        self.claims: GroupCommit[ClaimRequest, Claim] = GroupCommit(
            lambda requests: self._topping_up(claim_many(ledger, requests))
        )
        # Lease renewals of the tools running in this process: jobs claimed together beat
        # together, and what gathers while one renewal is written goes in the next statement.
        self.renewals: GroupCommit[tuple[str, int], bool] = GroupCommit(
            lambda held: renew_leases(ledger, held, self.lease_s)
        )

    def execute(self, job_id: str) -> Execution:
        try:
            claimed = self.claims.submit(ClaimRequest(job_id, self.worker_id, self.lease_s))
        except StorageUnavailableError:
            raise  # nothing is known: the caller keeps the message and tries again
        except LedgerError as exc:
            self.report_rejected(job_id, exc)
            raise
        return self.finish(job_id, claimed)

    def report_rejected(self, job_id: str, exc: BaseException) -> None:
        """This worker took the job's delivery, could not claim it and lets the message go:
        evidence that the message is gone, for the reconciler to send another (best effort:
        if even this cannot be written, the job waits for its start deadline, told as late)."""
        reason = f"{type(exc).__name__}: {exc}".splitlines()[0]
        try:
            with self.ledger.store.transaction() as tx:
                view = tx.job(job_id)
                if view is None or view.terminal:
                    return  # unknown, or settled meanwhile: no message of its is missed
                tx.reject_dispatch(
                    job_id, view.stream_version, f"{self.worker_id}: {reason}", now()
                )
        except LedgerError as failed:
            log.warning("job %s: the rejected delivery could not be reported: %s", job_id, failed)

    def claim_batch(self, job_ids: Sequence[str]) -> list[Claim]:
        """Claim several deliveries in one transaction (for a caller that gathered them
        itself; `execute` gathers concurrent callers through `claims`)."""
        claims = claim_many(
            self.ledger, [ClaimRequest(j, self.worker_id, self.lease_s) for j in job_ids]
        )
        return self._topping_up(claims)

    def _topping_up(self, claims: list[Claim]) -> list[Claim]:
        """Jobs started: their accounts' dispatch windows have room again (docs/fairness.md)."""
        if self.outbox is not None:
            started = [c.view.account for c in claims if c.result is ClaimResult.CLAIMED and c.view]
            self.outbox.top_up(sorted(set(started)))
        return claims

    def finish(
        self, job_id: str, claimed: Claim, tool_done: Callable[[], None] | None = None
    ) -> Execution:
        """`start`, waited for here: what the job came to, or the exception that ended it."""
        ended = threading.Event()
        results: list[Execution | Exception] = []

        def settled(result: Execution | Exception) -> None:
            results.append(result)
            ended.set()

        self.start(job_id, claimed, tool_done or _nothing, settled)
        ended.wait()
        if isinstance(results[0], Exception):
            raise results[0]
        return results[0]

    def start(
        self,
        job_id: str,
        claimed: Claim,
        tool_done: Callable[[], None],
        settled: Callable[[Execution | Exception], None],
    ) -> None:
        """The one way a claimed job runs. A claim that runs nothing settles here, at once.
        Otherwise the tool runs on a kept thread (an `async def` tool on the one tool loop,
        that thread waiting for it), which then records its outcome; the watchdog renews the
        lease meanwhile and, past the deadline, records the deadline's failure instead (an
        async tool's task is cancelled; a thread cannot be, and its late return is dropped).
        `tool_done` is called once the tool has returned or been given up on, before its
        outcome is recorded: its slot is free from then on. `settled` gets the `Execution`,
        or the exception that kept one from being recorded; it is called exactly once."""
        try:
            view = self._claimed_view(claimed)
            if view is None:
                settled(self._ran_nothing(job_id, claimed))
                return
        except Exception as exc:
            settled(exc)
            return
        spec = get_tool(view.tool)

        def conclude(payload: Payload) -> None:
            tool_done()
            try:
                done = self._record(view, payload)
            except Exception as exc:  # the caller logs it and lets the message go
                settled(exc)
            else:
                settled(done)

        if spec is None:
            self._threads.run(lambda: conclude(missing_tool(view)))
            return
        running: list[Future[Any]] = []  # an async tool's task, cancelled at the deadline

        def on_deadline() -> None:
            for future in running:
                future.cancel()
            conclude(failure_event(DeadlineExceeded(spec.timeout_s), attempt_of(spec, view)))

        def watched(spec: ToolSpec, args: BaseModel, ctx: ToolContext, view: JobView) -> Any:
            if spec.is_async:
                running.append(self._loop.submit(awaited(spec, args, ctx)))
            watch = self._watchdog.watch(view.job_id, view.attempts, spec.timeout_s, on_deadline)
            try:
                value = running[0].result() if running else spec.func(args, ctx)
            finally:
                if not self._watchdog.settle(watch):
                    raise Superseded()  # the deadline has settled this job
            return value

        def body() -> None:
            try:
                payload = tool_call.run(
                    spec, view, watched, self.ledger.secrets, self._heartbeat, self._checkpoint
                )
            except Superseded:
                return
            conclude(payload)

        self._threads.run(body)

    def _ran_nothing(self, job_id: str, claimed: Claim) -> Execution:
        """A claim that runs no tool (skipped, halted, deferred): what it came to."""
        seen, reason = claimed.view, claimed.reason
        if claimed.result is ClaimResult.DEFERRED and seen is not None:
            reason = self._defer(seen)
        status, code = (seen.status, seen.code) if seen is not None else (None, None)
        return Execution(job_id, claimed.result, status=status, code=code, reason=reason)

    def _defer(self, view: JobView) -> str:
        """The job's account is at its concurrency limit: its message goes again, `DEFER_S`
        later, confirmed before this delivery is acked (so the job always has a message in
        the broker). Operational state, not an event: the dispatch record is the new message's.
        A publish the broker did not confirm is reported like a rejected delivery: evidence
        for the reconciler to send another (never a lost job)."""
        telemetry().claim_deferred()
        if self.outbox is not None:
            sent = self.outbox.send_now(view, DEFER_S)
            if sent.confirmed:
                return f"account at its limit: again in {DEFER_S:g} s"
        self.report_rejected(view.job_id, DispatchError("the deferred message was not confirmed"))
        return "account at its limit: its message left to the reconciler"

    def _claimed_view(self, claimed: Claim) -> JobView | None:
        """The view to run, once the claim's own outcome (a halt) is observed."""
        if claimed.result is ClaimResult.HALTED and claimed.view is not None:
            self._observe_halt(claimed.view)
        if claimed.result is not ClaimResult.CLAIMED:
            return None
        assert claimed.view is not None
        self._queue_waited(claimed.view)
        return claimed.view

    @staticmethod
    def _queue_waited(view: JobView) -> None:
        if view.attempts == 1:  # the first start: how long the job waited in the queue
            telemetry().queue_waited((view.updated_at - view.created_at).total_seconds())

    def _record(self, view: JobView, payload: Payload) -> Execution:
        job_id = view.job_id
        event = NewEvent(payload=payload, actor=self.worker_id)
        spans = tracer()
        made = None
        if spans.enabled and view.trace is not None:
            attributes = job_attributes(job_id, view.tool, view.account)
            made = spans.start("outcomes.outcome", view.trace, attributes)
            made.set_attribute("outcomes.outcome", payload.type)
        try:
            recorded = record_outcome(self.ledger, view, event, retry_for_s=OUTCOME_WRITE_BUDGET_S)
            if made is not None:
                made.set_attribute("outcomes.late", recorded.late)
        except (StorageUnavailableError, ContentionError) as exc:
            if made is not None:
                made.fail("the outcome could not be recorded")
            # The tool ran: never claim it again. The reconciler will see the lease lapse.
            telemetry().outcome_unrecorded(view.tool)
            raise OutcomeUnrecordedError(job_id, payload.type) from exc
        finally:
            if made is not None:
                made.end()
        after = status_after(view, payload)  # folded once: the log, the metric and the answer
        self._observe_outcome(view, payload, recorded.late, after)
        retry = None
        if isinstance(payload, WorkRetryScheduled) and not recorded.late:
            retry = max(0.0, (payload.due_at - datetime.now(UTC)).total_seconds())
            if self.outbox is not None:
                self.outbox.send_version(job_id, recorded.version, retry, view.tool, view)
        status = None if recorded.late else after
        return Execution(
            job_id, ClaimResult.CLAIMED, payload.type, recorded.late, retry, status, payload.code
        )

    def _observe_outcome(
        self, view: JobView, payload: Payload, late: bool, status: Status | None
    ) -> None:
        event_log.outcome(view, payload, self.worker_id, late, status)
        if status is not None and status.terminal and not late:
            elapsed = (now() - view.created_at).total_seconds()
            telemetry().outcome_recorded(view.tool, status.value, elapsed)

    def _observe_halt(self, view: JobView) -> None:
        """A brake held the job at its claim: `work.halted` is its outcome."""
        halted = WorkHalted(attempt=view.attempts + 1, error=view.error) if view.error else None
        if halted is not None:
            self._observe_outcome(view, halted, False, status_after(view, halted))

    def _heartbeat(self, job_id: str, attempt: int) -> None:
        try:
            renewed = self.renewals.submit((job_id, attempt))
        except LedgerError as exc:  # the lease lapses; the reconciler will judge
            telemetry().lease_renewal_failed()
            log.warning("lease renewal for job %s failed: %s", job_id, exc)
            return
        if not renewed:  # the lease is no longer this attempt's: the reconciler judged it
            telemetry().lease_renewal_failed()

    def _checkpoint(self, view: JobView) -> None:
        try:
            held = brakes_holding(self.ledger, view.tool, view.account, view.turn)
        except LedgerError:
            raise BrakeEngaged(brake_unreadable()) from None  # fail closed, and say so
        if held:
            raise BrakeEngaged(brake_error(held[0]))

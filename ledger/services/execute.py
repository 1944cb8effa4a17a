"""Executing one job: claim it, run its tool under a deadline while renewing the lease, record
exactly one outcome, and dispatch the next attempt when a retry was scheduled. Knows nothing
of Celery: the worker adapter calls `Executor.execute` with a job id."""

from __future__ import annotations

import inspect
import logging
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from pydantic import BaseModel, ValidationError

from ledger import event_log
from ledger.batching import DaemonThreads, GroupCommit
from ledger.brakes import brake_error
from ledger.classify import Attempt, failure_event, outcome_event, scrubbed_error
from ledger.clock import now
from ledger.codes import Code
from ledger.decisions import describe_fields
from ledger.dispatch import Dispatcher
from ledger.error_info import ErrorInfo
from ledger.errors import (
    AwaitableReturned,
    BrakeEngaged,
    DeadlineExceeded,
    DispatchError,
    LedgerError,
    OutcomeUnrecordedError,
    StorageUnavailableError,
)
from ledger.events import NewEvent, Payload, WorkFailed, WorkHalted, WorkRetryScheduled
from ledger.job_view import JobView
from ledger.outcomes import Partial, Succeeded
from ledger.scrub import known_secrets
from ledger.services.ledger import Ledger
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
from ledger.tool_loop import SHARED, ToolLoop
from ledger.tools import ToolContext, ToolSpec, get_tool
from ledger.watchdog import Watchdog

log = logging.getLogger(__name__)

# How long a worker keeps retrying the outcome write (same event id) through a database
# outage before it gives up and leaves the job to the reconciler.
OUTCOME_WRITE_BUDGET_S = 600.0


ToolCall = Callable[[ToolSpec, BaseModel, ToolContext, JobView], Any]


class _Superseded(BaseException):  # not an error: a tool that returned too late
    """Raised past the tool (never into it) when its deadline already settled the job."""


@dataclass(frozen=True)
class Execution:
    job_id: str
    claim: ClaimResult
    event_type: str | None = None  # what was recorded for this attempt
    late: bool = False
    retry_in_s: float | None = None  # a retry was scheduled and dispatched this far ahead


class Executor:
    def __init__(
        self,
        ledger: Ledger,
        worker_id: str,
        dispatcher: Dispatcher | None = None,
        lease_s: float = 30.0,
        loop: ToolLoop = SHARED,
    ) -> None:
        self.ledger = ledger
        self.worker_id = worker_id
        self.dispatcher = dispatcher  # None: retries wait for the reconciler to dispatch them
        self.lease_s = lease_s
        self._threads = DaemonThreads("tool")
        self._watchdog = Watchdog(lease_s / 3, self._heartbeat, self._threads)
        self._loop = loop  # runs the async tools (see ledger/tool_loop.py for why one loop)
        # Claims from this process's task threads share one transaction per group.
        self.claims: GroupCommit[ClaimRequest, Claim] = GroupCommit(
            lambda requests: claim_many(ledger, requests)
        )
        # Lease renewals of the tools running in this process: jobs claimed together beat
        # together, and what gathers while one renewal is written goes in the next statement.
        self.renewals: GroupCommit[tuple[str, int], bool] = GroupCommit(
            lambda held: renew_leases(ledger, held, self.lease_s)
        )

    def execute(self, job_id: str) -> Execution:
        claimed = self.claims.submit(ClaimRequest(job_id, self.worker_id, self.lease_s))
        return self.finish(job_id, claimed)

    def claim_batch(self, job_ids: Sequence[str]) -> list[Claim]:
        """Claim several deliveries in one transaction (for a caller that gathered them
        itself; `execute` gathers concurrent callers through `claims`)."""
        return claim_many(
            self.ledger, [ClaimRequest(j, self.worker_id, self.lease_s) for j in job_ids]
        )

    def finish(
        self, job_id: str, claimed: Claim, tool_done: Callable[[], None] | None = None
    ) -> Execution:
        """After the claim: run the tool when it was claimed, record its one outcome.
        `tool_done` is called once the tool has returned (or been given up on at its
        deadline), before its outcome is recorded: the tool's slot is free from then on."""
        view = self._claimed_view(claimed)
        if view is None:
            return Execution(job_id, claimed.result)
        spec = get_tool(view.tool)
        payload = self._run(spec, view, self._call_with_deadline) if spec else _missing_tool(view)
        if tool_done is not None:
            tool_done()
        return self._record(view, payload)

    def start(
        self,
        claimed: Claim,
        tool_done: Callable[[], None],
        settled: Callable[[Execution | Exception], None],
    ) -> bool:
        """`finish` without a thread waiting on the tool, for a claimed `def` tool: the tool
        runs on a kept thread, which then records its outcome; the watchdog renews the lease
        meanwhile and, past the deadline, records the deadline's failure instead (the late
        return is dropped). `settled` gets what `finish` would return, or raise. False: not
        such a job (nothing was done; call `finish`)."""
        view = claimed.view if claimed.result is ClaimResult.CLAIMED else None
        spec = get_tool(view.tool) if view is not None else None
        if view is None or spec is None or spec.is_async:
            return False
        self._queue_waited(view)

        def conclude(payload: Payload) -> None:
            tool_done()
            try:
                done = self._record(view, payload)
            except Exception as exc:  # the caller logs it and lets the message go
                settled(exc)
            else:
                settled(done)

        def on_deadline() -> None:
            conclude(failure_event(DeadlineExceeded(spec.timeout_s), self._attempt(spec, view)))

        def watched(spec: ToolSpec, args: BaseModel, ctx: ToolContext, view: JobView) -> Any:
            watch = self._watchdog.watch(view.job_id, view.attempts, spec.timeout_s, on_deadline)
            try:
                value = spec.func(args, ctx)
            finally:
                if not self._watchdog.settle(watch):
                    raise _Superseded()  # the deadline has settled this job
            return value

        def body() -> None:
            try:
                payload = self._run(spec, view, watched)
            except _Superseded:
                return
            conclude(payload)

        self._threads.run(body)
        return True

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
        try:
            recorded = record_outcome(self.ledger, view, event, retry_for_s=OUTCOME_WRITE_BUDGET_S)
        except StorageUnavailableError as exc:
            # The tool ran: never claim it again. The reconciler will see the lease lapse.
            telemetry().outcome_unrecorded(view.tool)
            raise OutcomeUnrecordedError(job_id, payload.type) from exc
        self._observe_outcome(view, payload, recorded.late)
        retry = None
        if isinstance(payload, WorkRetryScheduled) and not recorded.late:
            retry = max(0.0, (payload.due_at - datetime.now(UTC)).total_seconds())
            self._dispatch_retry(job_id, retry)
        return Execution(job_id, ClaimResult.CLAIMED, payload.type, recorded.late, retry)

    def _observe_outcome(self, view: JobView, payload: Payload, late: bool) -> None:
        event_log.outcome(view, payload, self.worker_id, late)
        status = event_log.STATUS_AFTER.get(payload.type)
        if status is not None and status.terminal and not late:
            elapsed = (now() - view.created_at).total_seconds()
            telemetry().outcome_recorded(view.tool, status.value, elapsed)

    def _observe_halt(self, view: JobView) -> None:
        """A brake held the job at its claim: `work.halted` is its outcome."""
        halted = WorkHalted(attempt=view.attempts + 1, error=view.error) if view.error else None
        if halted is not None:
            self._observe_outcome(view, halted, late=False)

    def _run(self, spec: ToolSpec, view: JobView, call: ToolCall) -> Payload:
        attempt = view.attempts
        try:
            # Checked again here, not only at submit: a worker of another release may read
            # the arguments differently (a rolling deploy). Nothing runs then.
            args = spec.args_model.model_validate(view.args)
        except ValidationError as exc:
            return WorkFailed(attempt=attempt, error=_args_rejected(spec, exc))
        ctx = ToolContext(
            job_id=view.job_id,
            attempt=attempt,
            idempotency_key=view.idempotency_key or view.job_id,
            heartbeat=lambda: self._heartbeat(view.job_id, attempt),
            checkpoint=lambda: self._checkpoint(view),
        )
        try:
            value = _not_awaitable(call(spec, args, ctx, view))
        except BrakeEngaged as exc:
            # A tool may raise its own BrakeEngaged: its text is scrubbed like any other.
            error = scrubbed_error(exc.error, known_secrets(view.args))
            return WorkHalted(attempt=attempt, error=error)
        except Exception as exc:
            return failure_event(exc, self._attempt(spec, view))
        if isinstance(value, Succeeded | Partial):  # no text of the tool's to scrub
            return outcome_event(value, attempt)
        return outcome_event(value, attempt, known_secrets(view.args))

    def _call_with_deadline(
        self, spec: ToolSpec, args: BaseModel, ctx: ToolContext, view: JobView
    ) -> Any:
        """Run the tool in a thread (or, if async, on the loop); meanwhile renew the lease every
        lease/3 seconds. Both kinds are waited for here, so one deadline rule holds for both."""
        future = self._start(spec, args, ctx)
        beat_every = self.lease_s / 3
        start = time.monotonic()
        deadline, next_beat = start + spec.timeout_s, start + beat_every
        while True:
            wait = min(deadline, next_beat) - time.monotonic()
            if wait > 0:
                try:
                    return future.result(timeout=wait)
                except TimeoutError:
                    # The tool's own TimeoutError (`asyncio.wait_for` raises it) is a result,
                    # not this wait running out: never spin on it until the deadline.
                    if future.done():
                        raise
            moment = time.monotonic()
            if moment >= deadline:
                # A thread cannot be killed, a task can be cancelled (CancelledError at its
                # next await); either way, whatever it returns later is not recorded.
                if spec.is_async:  # only the loop's future: the thread's would refuse its result
                    future.cancel()
                raise DeadlineExceeded(spec.timeout_s)
            if moment >= next_beat:
                self._heartbeat(view.job_id, view.attempts)
                next_beat = moment + beat_every

    def _start(self, spec: ToolSpec, args: BaseModel, ctx: ToolContext) -> Future[Any]:
        if spec.is_async:
            return self._loop.submit(_awaited(spec, args, ctx))
        future: Future[Any] = Future()

        def target() -> None:
            try:
                future.set_result(spec.func(args, ctx))
            except BaseException as exc:
                future.set_exception(exc)

        self._threads.run(target)
        return future

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
            held = brakes_holding(self.ledger, view.tool, view.account)
        except LedgerError:
            raise BrakeEngaged(_brake_unreadable()) from None  # fail closed, and say so
        if held:
            raise BrakeEngaged(brake_error(held[0]))

    def _dispatch_retry(self, job_id: str, delay_s: float) -> None:
        if self.dispatcher is None:
            return
        try:
            self.dispatcher.dispatch(job_id, delay_s)
        except DispatchError as exc:  # the retry is recorded; the reconciler dispatches it
            log.warning("job %s: retry not dispatched (%s); the reconciler will", job_id, exc)

    def _attempt(self, spec: ToolSpec, view: JobView) -> Attempt:
        return Attempt(
            tool=spec.name,
            attempt=view.attempts,
            max_attempts=view.max_attempts,
            spends=view.spends,
            last_fingerprint=view.last_fingerprint,
            now=datetime.now(UTC),
            secrets=known_secrets(view.args),
        )


async def _awaited(spec: ToolSpec, args: BaseModel, ctx: ToolContext) -> Any:
    return await spec.func(args, ctx)


def _not_awaitable(value: Any) -> Any:
    """A `def` tool that returns a coroutine never ran its work: a failure, never a success."""
    if inspect.isawaitable(value):
        if inspect.iscoroutine(value):
            value.close()  # nobody will await it: no "never awaited" warning, no half-run body
        raise AwaitableReturned(type(value).__name__)
    return value


def _args_rejected(spec: ToolSpec, exc: ValidationError) -> ErrorInfo:
    problems = describe_fields(exc)
    return ErrorInfo(
        code=Code.INPUT_INVALID,
        dependency=spec.name,
        operation="validate the arguments in the worker",
        fix="deploy one release of the tool on the API and every worker, then submit again",
        message=f"The worker's {spec.name!r} does not accept the recorded arguments "
        f"({problems}); nothing ran.",
    )


def _brake_unreadable() -> ErrorInfo:
    return ErrorInfo(
        code=Code.BRAKE_ENGAGED,
        dependency="ledger",
        operation="re-check the brake between steps",
        fix="restore the workers' access to the ledger, then submit again",
        message="The brake could not be checked, so the work stopped to be safe.",
        cause="brake_state_unreadable",
    )


def _missing_tool(view: JobView) -> Payload:
    error = ErrorInfo(
        code=Code.CAPABILITY_UNAVAILABLE,
        dependency=view.tool,
        operation="load the tool in the worker",
        fix="add the tool's module to OUTCOMES_TOOLS on every worker",
        message=f"The worker that took this job has no tool {view.tool!r}; nothing ran.",
    )
    return WorkFailed(attempt=view.attempts, error=error)

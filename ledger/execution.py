"""Executing one job: claim it, run its tool under a deadline while renewing the lease, and
record exactly one outcome. Knows nothing of Celery: the worker adapter calls `execute`."""

from __future__ import annotations

import logging
import threading
import time
from concurrent.futures import Future
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from ledger.brakes import brake_error
from ledger.classify import Attempt, DeadlineExceeded, failure_event, outcome_event
from ledger.codes import Code
from ledger.error_info import ErrorInfo
from ledger.errors import LedgerError, StorageUnavailableError
from ledger.events import NewEvent, Payload, WorkFailed, WorkHalted, WorkRetryScheduled
from ledger.job_view import JobView
from ledger.persistence.store import EventStore
from ledger.persistence.work import (
    ClaimResult,
    brakes_holding,
    claim,
    record_outcome,
    renew_lease,
)
from ledger.tools import ToolContext, ToolSpec, get_tool

log = logging.getLogger(__name__)


# How long a worker keeps retrying the outcome write (same event id) through a database
# outage before it gives up and leaves the job to the reconciler.
OUTCOME_WRITE_BUDGET_S = 600.0


class OutcomeUnrecordedError(LedgerError):
    """The tool ran but its outcome could not be written within the budget."""

    def __init__(self, job_id: str, event_type: str) -> None:
        super().__init__(f"job {job_id}: {event_type} could not be recorded; the ledger is down")
        self.job_id = job_id


class BrakeEngaged(Exception):
    """A brake was pulled while the tool ran; stop between steps (or return a Partial)."""

    def __init__(self, error: ErrorInfo) -> None:
        super().__init__(error.message)
        self.error = error


@dataclass(frozen=True)
class Execution:
    job_id: str
    claim: ClaimResult
    event_type: str | None = None  # what was recorded for this attempt
    late: bool = False
    retry_in_s: float | None = None  # a retry was scheduled: dispatch again after this


class Executor:
    def __init__(self, store: EventStore, worker_id: str, lease_s: float = 30.0) -> None:
        self.store = store
        self.worker_id = worker_id
        self.lease_s = lease_s

    def execute(self, job_id: str) -> Execution:
        claimed = claim(self.store, job_id, self.worker_id, self.lease_s)
        if claimed.result is not ClaimResult.CLAIMED:
            return Execution(job_id, claimed.result)
        assert claimed.view is not None
        view = claimed.view
        spec = get_tool(view.tool)
        payload = self._run(spec, view) if spec else _missing_tool(view)
        event = NewEvent(payload=payload, actor=self.worker_id)
        try:
            recorded = record_outcome(
                self.store, job_id, claimed.version, event, retry_for_s=OUTCOME_WRITE_BUDGET_S
            )
        except StorageUnavailableError as exc:
            # The tool ran: never claim it again. The reconciler will see the lease lapse.
            raise OutcomeUnrecordedError(job_id, payload.type) from exc
        retry = None
        if isinstance(payload, WorkRetryScheduled) and not recorded.late:
            retry = max(0.0, (payload.due_at - datetime.now(UTC)).total_seconds())
        return Execution(job_id, claimed.result, payload.type, recorded.late, retry)

    def _run(self, spec: ToolSpec, view: JobView) -> Payload:
        attempt = view.attempts
        ctx = ToolContext(
            job_id=view.job_id,
            attempt=attempt,
            idempotency_key=view.idempotency_key or view.job_id,
            heartbeat=lambda: self._heartbeat(view.job_id, attempt),
            checkpoint=lambda: self._checkpoint(view),
        )
        args = spec.args_model.model_validate(view.args)
        try:
            value = self._call_with_deadline(spec, args, ctx, view)
        except BrakeEngaged as exc:
            return WorkHalted(attempt=attempt, error=exc.error)
        except Exception as exc:
            return failure_event(exc, self._attempt(spec, view))
        return outcome_event(value, attempt)

    def _call_with_deadline(
        self, spec: ToolSpec, args: Any, ctx: ToolContext, view: JobView
    ) -> Any:
        """Run the tool in a thread; meanwhile renew the lease every lease/3 seconds."""
        future: Future[Any] = Future()

        def target() -> None:
            try:
                future.set_result(spec.func(args, ctx))
            except BaseException as exc:
                future.set_exception(exc)

        runner = threading.Thread(target=target, name=f"tool-{view.job_id}", daemon=True)
        runner.start()
        beat_every = self.lease_s / 3
        now = time.monotonic()
        deadline, next_beat = now + spec.timeout_s, now + beat_every
        while True:
            wait = min(deadline, next_beat) - time.monotonic()
            if wait > 0:
                try:
                    return future.result(timeout=wait)
                except TimeoutError:
                    pass
            now = time.monotonic()
            if now >= deadline:
                # The thread cannot be killed; whatever it returns later is not recorded.
                raise DeadlineExceeded(spec.timeout_s)
            if now >= next_beat:
                self._heartbeat(view.job_id, view.attempts)
                next_beat = now + beat_every

    def _heartbeat(self, job_id: str, attempt: int) -> None:
        try:
            renew_lease(self.store, job_id, attempt, self.lease_s)
        except LedgerError as exc:  # the lease lapses; the reconciler will judge
            log.warning("lease renewal for job %s failed: %s", job_id, exc)

    def _checkpoint(self, view: JobView) -> None:
        try:
            held = brakes_holding(self.store, view.tool, view.account)
        except LedgerError:
            raise BrakeEngaged(_brake_unreadable()) from None  # fail closed, and say so
        if held:
            raise BrakeEngaged(brake_error(held[0]))

    def _attempt(self, spec: ToolSpec, view: JobView) -> Attempt:
        return Attempt(
            tool=spec.name,
            attempt=view.attempts,
            max_attempts=view.max_attempts,
            spends=view.spends,
            last_fingerprint=view.last_fingerprint,
            now=datetime.now(UTC),
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

"""A worker's writes: claim a job (after re-checking the brake), renew its lease, and record
its one outcome (or keep it as late when the job was closed meanwhile)."""

from __future__ import annotations

import contextlib
import time
import uuid
from dataclasses import dataclass
from datetime import timedelta
from enum import StrEnum

from ledger.brake_view import BrakeView
from ledger.brakes import brake_error, holding
from ledger.clock import now
from ledger.codes import Status
from ledger.errors import (
    AlreadyTerminalError,
    ConcurrencyError,
    DuplicateEventError,
    StorageUnavailableError,
)
from ledger.events import (
    NewEvent,
    Payload,
    WorkHalted,
    WorkLateOutcome,
    WorkStarted,
    job_id_of,
    job_stream,
)
from ledger.job_view import JobView
from ledger.persistence.base import BRAKES_LOCK
from ledger.services.ledger import Ledger


class ClaimResult(StrEnum):
    CLAIMED = "claimed"
    HALTED = "halted"  # a brake holds the job: recorded, nothing ran
    SKIPPED = "skipped"  # unknown, closed, running elsewhere, or claimed by another delivery


@dataclass(frozen=True)
class Claim:
    result: ClaimResult
    reason: str
    view: JobView | None = None  # as of the claim's own event, when it recorded one

    @property
    def version(self) -> int:
        """The stream version the outcome must follow."""
        return self.view.stream_version if self.view else 0


def claim(ledger: Ledger, job_id: str, worker: str, lease_s: float) -> Claim:
    """Check the brake and claim the job in one transaction, ordered against `brake pull`.

    Any database error propagates: if the brake cannot be read, the work does not start.
    """
    stream = job_stream(job_id)
    try:
        with ledger.store.transaction() as tx:
            tx.lock(BRAKES_LOCK, shared=True)
            view = tx.job(job_id)
            if view is None:
                return Claim(ClaimResult.SKIPPED, "unknown job")
            if view.terminal or view.status is Status.RUNNING:
                # Running means another delivery owns it; only the reconciler may decide it
                # was lost, so a redelivered message never runs the tool a second time.
                return Claim(ClaimResult.SKIPPED, f"job is {view.status.value}", view)
            attempt = view.attempts + 1
            held = holding(tx.active_brakes(), view.tool, view.account)
            if held:
                halted = WorkHalted(attempt=attempt, error=brake_error(held[0]))
                appended = tx.append(
                    stream, [NewEvent(payload=halted, actor=worker)], view.stream_version
                )
                return Claim(ClaimResult.HALTED, held[0].brake_id, appended.job)
            expires = now() + timedelta(seconds=lease_s)
            started = WorkStarted(attempt=attempt, worker=worker, lease_expires_at=expires)
            appended = tx.append(
                stream, [NewEvent(payload=started, actor=worker)], view.stream_version
            )
            tx.start_lease(job_id, attempt, worker, expires)
            return Claim(ClaimResult.CLAIMED, "claimed", appended.job)
    except ConcurrencyError:
        return Claim(ClaimResult.SKIPPED, "claimed by another delivery")


def renew_lease(ledger: Ledger, job_id: str, attempt: int, lease_s: float) -> bool:
    """Push the lease forward; False when the lease is no longer this attempt's."""
    with ledger.store.transaction() as tx:
        return tx.renew_lease(job_id, attempt, now() + timedelta(seconds=lease_s))


def brakes_holding(ledger: Ledger, tool: str, account: str) -> list[BrakeView]:
    with ledger.store.reading() as reads:
        return holding(reads.active_brakes(), tool, account)


@dataclass(frozen=True)
class Recorded:
    late: bool  # the job had been closed; the outcome was kept as work.late_outcome


def record_outcome(
    ledger: Ledger,
    job_id: str,
    after_version: int,
    event: NewEvent,
    *,
    retry_for_s: float = 60.0,
) -> Recorded:
    """Record the attempt's outcome exactly once, surviving database blips.

    A retried write reuses the same event id, so a write that did land is recognised rather
    than duplicated. If the job was closed meanwhile (the reconciler gave up on this worker),
    the outcome is kept as `work.late_outcome` and the status does not change.
    """
    deadline = time.monotonic() + retry_for_s
    delay = 0.05
    while True:
        try:
            return _record_once(ledger, job_id, after_version, event)
        except StorageUnavailableError:
            if time.monotonic() + delay > deadline:
                raise
            time.sleep(delay)  # backoff between reconnect attempts to a blipping database
            delay = min(delay * 2, 2.0)


def _record_once(ledger: Ledger, job_id: str, after_version: int, event: NewEvent) -> Recorded:
    stream = job_stream(job_id)
    attempt = getattr(event.payload, "attempt", 0)
    while True:
        try:
            with ledger.store.transaction() as tx:
                tx.append(stream, [event], after_version)
                tx.drop_lease(job_id, attempt)
            return Recorded(late=False)
        except (ConcurrencyError, AlreadyTerminalError):
            pass
        history = ledger.store.read_stream(stream)
        if any(e.event_id == event.event_id for e in history):
            return Recorded(late=False)  # an earlier try committed before the connection broke
        newer = [e for e in history if e.stream_version > after_version]
        if not newer or any(e.type != "work.late_outcome" for e in newer):
            break
        # Only an earlier, lost attempt's late outcome moved the stream: ours is on time.
        after_version = newer[-1].stream_version
    _append_late(ledger, stream, event)
    return Recorded(late=True)


def _append_late(ledger: Ledger, stream: str, event: NewEvent) -> None:
    outcome: Payload = event.payload
    data = outcome.model_dump(mode="json", exclude={"type", "attempt"})
    late = WorkLateOutcome(
        attempt=getattr(outcome, "attempt", 0),
        outcome_type=outcome.type,
        outcome=data,
        late_code=outcome.code,
    )
    # Derived id: a retried late write is recognised instead of being kept twice.
    late_id = uuid.uuid5(_LATE, str(event.event_id))
    with contextlib.suppress(DuplicateEventError), ledger.store.transaction() as tx:
        tx.append(stream, [NewEvent(payload=late, actor=event.actor, event_id=late_id)])
        tx.drop_lease(job_id_of(stream), late.attempt)


_LATE = uuid.UUID("6c617465-6f75-7463-6f6d-650000000000")

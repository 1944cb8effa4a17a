"""The worker's writes: claim a job (after re-checking the brake), renew its lease, and
record its one outcome (or keep it as late when the job was closed meanwhile)."""

from __future__ import annotations

import contextlib
import time
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from enum import StrEnum

from sqlalchemy import Connection, delete, insert, update

from ledger.brake_view import BrakeView
from ledger.brakes import brake_error, holding
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
from ledger.persistence.brakes import active_brakes
from ledger.persistence.jobs import load_job
from ledger.persistence.locks import BRAKE_LOCK_KEY, lock_shared
from ledger.persistence.schema import leases
from ledger.persistence.store import EventStore


class ClaimResult(StrEnum):
    CLAIMED = "claimed"
    HALTED = "halted"  # a brake holds the job: recorded, nothing ran
    SKIPPED = "skipped"  # unknown, closed, running elsewhere, or claimed by another delivery


@dataclass(frozen=True)
class Claim:
    result: ClaimResult
    reason: str
    view: JobView | None = None
    version: int = 0  # the stream version after work.started


def claim(store: EventStore, job_id: str, worker: str, lease_s: float) -> Claim:
    """Check the brake and claim the job in one transaction, ordered against `brake pull`.

    Any database error propagates: if the brake cannot be read, the work does not start.
    """
    stream = job_stream(job_id)
    try:
        with store.transaction() as tx:
            lock_shared(tx.conn, BRAKE_LOCK_KEY)
            view = load_job(tx.conn, job_id)
            if view is None:
                return Claim(ClaimResult.SKIPPED, "unknown job")
            if view.terminal or view.status is Status.RUNNING:
                # Running means another delivery owns it; only the reconciler may decide it
                # was lost, so a redelivered message never runs the tool a second time.
                return Claim(ClaimResult.SKIPPED, f"job is {view.status.value}", view)
            version = view.stream_version  # kept in step with the stream, same transaction
            attempt = view.attempts + 1
            held = holding(active_brakes(tx.conn), view.tool, view.account)
            if held:
                halted = WorkHalted(attempt=attempt, error=brake_error(held[0]))
                tx.append(stream, [NewEvent(payload=halted, actor=worker)], version)
                return Claim(ClaimResult.HALTED, held[0].brake_id, view, version + 1)
            expires = datetime.now(UTC) + timedelta(seconds=lease_s)
            started = WorkStarted(attempt=attempt, worker=worker, lease_expires_at=expires)
            tx.append(stream, [NewEvent(payload=started, actor=worker)], version)
            if attempt > 1:  # an earlier attempt's lease may linger (a lost worker)
                tx.conn.execute(delete(leases).where(leases.c.job_id == job_id))
            tx.conn.execute(
                insert(leases).values(
                    job_id=job_id, attempt=attempt, worker=worker, expires_at=expires
                )
            )
            claimed = view.model_copy(update={"attempts": attempt, "status": Status.RUNNING})
            return Claim(ClaimResult.CLAIMED, "claimed", claimed, version + 1)
    except ConcurrencyError:
        return Claim(ClaimResult.SKIPPED, "claimed by another delivery")


def renew_lease(store: EventStore, job_id: str, attempt: int, lease_s: float) -> bool:
    """Push the lease forward; False when the lease is no longer this attempt's."""
    expires = datetime.now(UTC) + timedelta(seconds=lease_s)
    with store.transaction() as tx:
        result = tx.conn.execute(
            update(leases)
            .where(leases.c.job_id == job_id, leases.c.attempt == attempt)
            .values(expires_at=expires)
        )
        return bool(result.rowcount)


def brakes_holding(store: EventStore, tool: str, account: str) -> list[BrakeView]:
    with store.reading() as conn:
        return holding(active_brakes(conn), tool, account)


@dataclass(frozen=True)
class Recorded:
    late: bool  # the job had been closed; the outcome was kept as work.late_outcome


def record_outcome(
    store: EventStore,
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
            return _record_once(store, job_id, after_version, event)
        except StorageUnavailableError:
            if time.monotonic() + delay > deadline:
                raise
            time.sleep(delay)  # backoff between reconnect attempts to a blipping database
            delay = min(delay * 2, 2.0)


def _record_once(store: EventStore, job_id: str, after_version: int, event: NewEvent) -> Recorded:
    stream = job_stream(job_id)
    attempt = getattr(event.payload, "attempt", 0)
    while True:
        try:
            with store.transaction() as tx:
                tx.append(stream, [event], after_version)
                drop_lease(tx.conn, job_id, attempt)
            return Recorded(late=False)
        except (ConcurrencyError, AlreadyTerminalError):
            pass
        history = store.read_stream(stream)
        if any(e.event_id == event.event_id for e in history):
            return Recorded(late=False)  # an earlier try committed before the connection broke
        newer = [e for e in history if e.stream_version > after_version]
        if not newer or any(e.type != "work.late_outcome" for e in newer):
            break
        # Only an earlier, lost attempt's late outcome moved the stream: ours is on time.
        after_version = newer[-1].stream_version
    _append_late(store, stream, event)
    return Recorded(late=True)


def drop_lease(conn: Connection, job_id: str, attempt: int) -> None:
    """The attempt is over: its lease goes (a later attempt's lease stays)."""
    conn.execute(delete(leases).where(leases.c.job_id == job_id, leases.c.attempt == attempt))


def _append_late(store: EventStore, stream: str, event: NewEvent) -> None:
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
    with contextlib.suppress(DuplicateEventError), store.transaction() as tx:
        tx.append(stream, [NewEvent(payload=late, actor=event.actor, event_id=late_id)])
        drop_lease(tx.conn, job_id_of(stream), late.attempt)


_LATE = uuid.UUID("6c617465-6f75-7463-6f6d-650000000000")

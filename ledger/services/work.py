"""A worker's writes: claim a job (after re-checking the brake), renew its lease, and record
its one outcome (or keep it as late when the job was closed meanwhile)."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import timedelta
from enum import StrEnum

from ledger.brake_view import BrakeView
from ledger.brakes import brake_error, holding, scopes_for
from ledger.clock import now
from ledger.codes import Status
from ledger.errors import ContentionError, JobStreamError, StorageUnavailableError
from ledger.events import (
    NewEvent,
    Payload,
    WorkHalted,
    WorkLateOutcome,
    WorkStarted,
    job_stream,
)
from ledger.job_view import JobView
from ledger.persistence.appends import AppendStatus, JobAppend, JobAppended, LeaseChange
from ledger.persistence.base import Writes
from ledger.runtime.ledger import Ledger
from ledger.tracing import Span, job_attributes, tracer


class ClaimResult(StrEnum):
    CLAIMED = "claimed"
    HALTED = "halted"  # a brake holds the job: recorded, nothing ran
    SKIPPED = "skipped"  # unknown, closed, running elsewhere, or claimed by another delivery
    # Its account runs as many jobs as it may (`OUTCOMES_ACCOUNT_CONCURRENCY`): not started,
    # nothing recorded; its message goes again a moment later (docs/fairness.md).
    DEFERRED = "deferred"


@dataclass(frozen=True)
class ClaimRequest:
    job_id: str
    worker: str
    lease_s: float


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
    return claim_many(ledger, [ClaimRequest(job_id, worker, lease_s)])[0]


def claim_many(ledger: Ledger, requests: Sequence[ClaimRequest]) -> list[Claim]:
    """Claim jobs together, in one transaction: one read of their views, then one batch that
    re-checks the brake and records `work.started` (with the lease) for each job no brake
    holds; a job a brake holds is recorded `work.halted`, and nothing runs.

    The batch checks the brakes under the brakes lock, shared, which `brake pull` takes
    exclusive: no work starts after a pull has committed. It also checks each stream's head,
    so a job that moved since the read (another delivery claimed it) is skipped. The claim
    commits only when this worker asks it to: a worker killed while it waits for the lock
    leaves nothing recorded, and its message goes to another (never autocommit here: the server
    would commit a claim whose client had died, and a job that never started would read as a
    lost attempt; tests/reliability/test_worker_loss.py). Any database error propagates:
    if the brake cannot be read, no work starts.

    With a per-account concurrency limit, a job whose account already runs that many (its
    live leases, fleet-wide) is DEFERRED: nothing is recorded for it. The accounts' locks are
    taken, in order, before their leases are counted and held to commit, so two workers
    claiming for one account count one after the other.
    """
    spans: dict[str, Span] = {}
    try:
        claims = _claim_many(ledger, requests, spans)
        for request, claimed in zip(requests, claims, strict=True):
            if (made := spans.pop(request.job_id, None)) is not None:  # its first delivery's
                made.set_attribute("outcomes.claim", claimed.result.value)
                made.end()
        return claims
    except BaseException as exc:
        for made in spans.values():
            made.fail(type(exc).__name__)
        raise
    finally:
        for made in spans.values():
            made.end()


def _claim_many(
    ledger: Ledger, requests: Sequence[ClaimRequest], spans: dict[str, Span]
) -> list[Claim]:
    spanning = tracer()
    traced = spanning if spanning.enabled else None
    limit = ledger.limits.concurrency
    with ledger.store.transaction() as tx:
        views = tx.jobs_by_id(list(dict.fromkeys(r.job_id for r in requests)))
        room = _room(tx, views.values(), limit) if limit else None
        decided: list[Claim | JobAppend] = []
        taken: set[str] = set()
        for request in requests:
            view = views.get(request.job_id)
            if room is not None and view is not None and _runnable(view, request, taken):
                if room.get(view.account, 0) <= 0:
                    decided.append(Claim(ClaimResult.DEFERRED, "account at its limit", view))
                    continue
                room[view.account] -= 1
            if request.job_id in taken:  # the same job twice in one batch: one delivery wins
                decided.append(Claim(ClaimResult.SKIPPED, "claimed by another delivery", view))
            elif view is None:
                decided.append(Claim(ClaimResult.SKIPPED, "unknown job"))
            elif view.terminal or view.status in _NOT_CLAIMABLE:
                # Running means another delivery owns it; only the reconciler may decide it
                # was lost, so a redelivered message never runs the tool a second time. A
                # parked call runs only once a person approved it (docs/approvals.md).
                decided.append(Claim(ClaimResult.SKIPPED, f"job is {view.status.value}", view))
            else:
                taken.add(request.job_id)
                decided.append(_start(request, view))
                if traced is not None and view.trace is not None:  # one span a job, the batch's
                    attributes = job_attributes(view.job_id, view.tool, view.account)
                    spans[view.job_id] = traced.start("outcomes.claim", view.trace, attributes)
        starts = [d for d in decided if isinstance(d, JobAppend)]
        done = dict(zip((s.job_id for s in starts), tx.append_jobs(starts), strict=True))
        halts = [_halt(s, done[s.job_id]) for s in starts if done[s.job_id].brakes]
        done |= dict(zip((h.job_id for h in halts), tx.append_jobs(halts), strict=True))
    return [d if isinstance(d, Claim) else _claimed(d, done[d.job_id]) for d in decided]


def _runnable(view: JobView, request: ClaimRequest, taken: set[str]) -> bool:
    return request.job_id not in taken and not view.terminal and view.status not in _NOT_CLAIMABLE


_NOT_CLAIMABLE = frozenset({Status.RUNNING, Status.AWAITING_APPROVAL})


def _room(tx: Writes, views: Iterable[JobView], limit: int) -> dict[str, int]:
    """How many more jobs each of these accounts may start, under the accounts' locks."""
    accounts = sorted({v.account for v in views if not v.terminal})
    for account in accounts:  # in order: two claims never wait for each other's next lock
        tx.lock("account running", account)
    running = tx.running_by_account(accounts, now())
    return {account: limit - running.get(account, 0) for account in accounts}


def _start(request: ClaimRequest, view: JobView) -> JobAppend:
    attempt = view.attempts + 1
    expires = now() + timedelta(seconds=request.lease_s)
    started = WorkStarted(attempt=attempt, worker=request.worker, lease_expires_at=expires)
    lease = LeaseChange("start", attempt, request.worker, expires)
    event = NewEvent(payload=started, actor=request.worker)
    scopes = scopes_for(view.tool, view.account, view.turn)
    return JobAppend(view.job_id, [event], view, lease, brake_scopes=scopes, brakes_lock=True)


def _halt(start: JobAppend, braked: JobAppended) -> JobAppend:
    """A brake held the job: the claim records that, and nothing runs."""
    attempt = start.before.attempts + 1 if start.before else 1
    halted = WorkHalted(attempt=attempt, error=brake_error(braked.brakes[0]))
    event = NewEvent(payload=halted, actor=start.events[0].actor)
    return JobAppend(start.job_id, [event], start.before)


def _claimed(append: JobAppend, done: JobAppended) -> Claim:
    if done.status is not AppendStatus.OK:
        return Claim(ClaimResult.SKIPPED, "claimed by another delivery")
    payload = done.appended.events[0].payload if done.appended else None
    if isinstance(payload, WorkHalted):
        return Claim(ClaimResult.HALTED, payload.error.cause or "", done.job)
    return Claim(ClaimResult.CLAIMED, "claimed", done.job)


def renew_leases(ledger: Ledger, held: Sequence[tuple[str, int]], lease_s: float) -> list[bool]:
    """Push the leases of these (job id, attempt) pairs forward, in one transaction and one
    statement; for each, False when the lease is no longer that attempt's."""
    with ledger.store.transaction() as tx:
        return tx.renew_leases(held, now() + timedelta(seconds=lease_s))


def brakes_holding(
    ledger: Ledger, tool: str, account: str, turn: str | None = None
) -> list[BrakeView]:
    with ledger.store.reading() as reads:
        return holding(reads.active_brakes(), tool, account, turn)


MOVED_TRIES = 5  # reads and appends of an outcome whose job moved, before giving up


@dataclass(frozen=True)
class Recorded:
    late: bool  # the job had been closed; the outcome was kept as work.late_outcome
    version: int = 0  # the outcome's stream version (on time); a retry's message is for it


def record_outcome(
    ledger: Ledger,
    claimed: JobView,
    event: NewEvent,
    *,
    retry_for_s: float = 60.0,
) -> Recorded:
    """Record the attempt's outcome exactly once, surviving database blips.

    The write joins this process's group commit and follows the claim's own view (one round
    trip for the group on Postgres). A retried write reuses the same event id, so a write that
    did land is recognised rather than duplicated. If the job moved meanwhile (the reconciler
    gave up on this worker), the outcome is kept as `work.late_outcome` and the status does not
    change.
    """
    attempt = getattr(event.payload, "attempt", 0)
    append = JobAppend(claimed.job_id, [event], claimed, LeaseChange("drop", attempt))
    deadline = time.monotonic() + retry_for_s
    delay = 0.05
    while True:
        try:
            done = ledger.appends.submit(append)
            if done.status in (AppendStatus.OK, AppendStatus.DUPLICATE):
                return Recorded(late=False, version=claimed.stream_version + 1)
            return _record_once(ledger, claimed, event)
        except StorageUnavailableError:
            if time.monotonic() + delay > deadline:
                raise
            time.sleep(delay)  # backoff between reconnect attempts to a blipping database
            delay = min(delay * 2, 2.0)


def _record_once(ledger: Ledger, claimed: JobView, event: NewEvent) -> Recorded:
    """The group commit's append did not land: find out why, from the stream, and record the
    outcome on time (only late outcomes of earlier, lost attempts followed the claim) or late."""
    stream = job_stream(claimed.job_id)
    attempt = getattr(event.payload, "attempt", 0)
    for _ in range(MOVED_TRIES):
        with ledger.store.reading() as reads:
            history = reads.read_stream(stream)
            current = reads.job(claimed.job_id)
        mine = [e.stream_version for e in history if e.event_id == event.event_id]
        if mine:  # an earlier try committed before the connection broke
            return Recorded(late=False, version=mine[0])
        newer = [e for e in history if e.stream_version > claimed.stream_version]
        if current is None or any(e.type != "work.late_outcome" for e in newer):
            break
        append = JobAppend(claimed.job_id, [event], current, LeaseChange("drop", attempt))
        done = ledger.store.append_jobs([append])[0]
        if done.status is AppendStatus.OK:
            return Recorded(late=False, version=current.stream_version + 1)
        if done.status is AppendStatus.TERMINAL:  # settled since the read
            break
        # Moved again since the read, or our earlier try landed: look again.
    else:
        raise _still_moving(claimed.job_id)
    _append_late(ledger, claimed.job_id, event)
    return Recorded(late=True)


def _append_late(ledger: Ledger, job_id: str, event: NewEvent) -> None:
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
    kept = NewEvent(payload=late, actor=event.actor, event_id=late_id)
    for _ in range(MOVED_TRIES):  # after whatever the stream holds now (it follows any event)
        with ledger.store.reading() as reads:
            current = reads.job(job_id)
        if current is None:
            raise JobStreamError(f"job {job_id}: no stream to keep a late outcome in")
        append = JobAppend(job_id, [kept], current, LeaseChange("drop", late.attempt))
        done = ledger.store.append_jobs([append])[0]
        if done.status in (AppendStatus.OK, AppendStatus.DUPLICATE):
            return
    raise _still_moving(job_id)


def _still_moving(job_id: str) -> ContentionError:
    """The stream kept moving under every try (or its read model disagrees with it): nothing
    of this outcome was recorded, its lease lapses and the reconciler judges the attempt."""
    return ContentionError(f"job {job_id}: the outcome could not follow its stream; not recorded")


_LATE = uuid.UUID("6c617465-6f75-7463-6f6d-650000000000")

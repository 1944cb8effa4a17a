"""The batch append's general way (`Writes.append_jobs` on every store that has no one-call
lane: memory, SQLite, and Postgres for views written before `head_hash`): each item appended
in a savepoint of the transaction, each precondition answered by the item's status as the
Postgres function answers it, in the same order: a revoked token, the brakes, then the
append's own checks (head, one terminal event, event ids, the idempotency key), then the
quota."""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import AbstractContextManager
from datetime import datetime
from typing import Protocol

from ledger.brake_view import BrakeView
from ledger.errors import (
    AlreadyTerminalError,
    ConcurrencyError,
    DuplicateEventError,
    IdempotencyKeyTakenError,
)
from ledger.events import NewEvent, job_stream
from ledger.job_view import JobView
from ledger.persistence.appends import (
    Appended,
    AppendStatus,
    JobAppend,
    JobAppended,
    LeaseChange,
    QuotaCheck,
)
from ledger.token_view import TokenView

# The lock workers take shared while they check the brake and claim (and submits while they
# check it), and `brake pull` takes exclusive, so that no work starts after a pull has
# committed (contract §5). `base.BRAKES_LOCK` names it for the other stores' code.
BRAKES_LOCK = "brakes"


class LaneWrites(Protocol):
    """What the general way needs of a write transaction (every `Writes` has it)."""

    def append(
        self, stream_id: str, new_events: Sequence[NewEvent], expected_version: int | None = None
    ) -> Appended: ...
    def isolated(self) -> AbstractContextManager[None]: ...
    def lock(self, *key: str, shared: bool = False) -> None: ...
    def token(self, token_id: str) -> TokenView | None: ...
    def active_brakes(self) -> list[BrakeView]: ...
    def job_by_idempotency_key(self, account: str, key: str) -> JobView | None: ...
    def accepted_in_window(
        self, account: str, tool: str, since: datetime
    ) -> tuple[int, datetime | None]: ...
    def start_lease(self, job_id: str, attempt: int, worker: str, expires_at: datetime) -> None: ...
    def drop_lease(self, job_id: str, attempt: int) -> None: ...


class _OverQuota(Exception):  # control flow inside one append, never raised out
    """Undoes an append the quota refuses (its savepoint rolls back)."""

    def __init__(self, oldest: datetime | None) -> None:
        super().__init__("over quota")
        self.oldest = oldest


def append_each(tx: LaneWrites, items: Sequence[JobAppend]) -> list[JobAppended]:
    """Append each item in this transaction; an item that cannot be appended reports why
    (its status) and leaves the others to commit."""
    if any(item.brakes_lock or item.brake_scopes for item in items):
        # Ordered against `brake pull` and release, which take it exclusive (writers no
        # longer share one lock that would order them).
        tx.lock(BRAKES_LOCK, shared=True)
    return [_append_one(tx, item) for item in items]


def _append_one(tx: LaneWrites, item: JobAppend) -> JobAppended:
    if item.token_id is not None:
        token = tx.token(item.token_id)
        if token is None or token.revoked:
            return JobAppended(AppendStatus.REVOKED)
    if item.brake_scopes:
        held = [b for b in tx.active_brakes() if b.scope in item.brake_scopes]
        if held:
            return JobAppended(AppendStatus.BRAKED, brakes=tuple(held))
    payload = item.events[0].payload
    account = getattr(payload, "account", "")
    try:
        with tx.isolated():
            appended = tx.append(job_stream(item.job_id), item.events, item.expected_version)
            if item.lease is not None:
                _change_lease(tx, item.job_id, item.lease)
            if item.quota is not None:
                _within_quota(tx, account, getattr(payload, "tool", ""), item.quota)
    except _OverQuota as over:
        return JobAppended(AppendStatus.QUOTA, oldest=over.oldest)
    except ConcurrencyError:
        return JobAppended(AppendStatus.CONFLICT)
    except AlreadyTerminalError:
        return JobAppended(AppendStatus.TERMINAL)
    except DuplicateEventError:
        return JobAppended(AppendStatus.DUPLICATE)
    except IdempotencyKeyTakenError:
        key = getattr(payload, "idempotency_key", None)
        holder = tx.job_by_idempotency_key(account, key) if key else None
        return JobAppended(AppendStatus.IDEMPOTENCY, holder=holder)
    return JobAppended(AppendStatus.OK, appended)


def _within_quota(tx: LaneWrites, account: str, tool: str, quota: QuotaCheck) -> None:
    """Counted after the job's own append (a replay or a retried write is answered first, as
    the SQL lane does), under the account's and tool's lock: raises _OverQuota to undo the
    append when the window already held `limit` before it."""
    tx.lock("quota", account, tool)
    count, oldest = tx.accepted_in_window(account, tool, quota.since)
    if count > quota.limit:
        raise _OverQuota(oldest)


def _change_lease(tx: LaneWrites, job_id: str, change: LeaseChange) -> None:
    if change.op == "start":
        assert change.expires_at is not None
        tx.start_lease(job_id, change.attempt, change.worker, change.expires_at)
    else:
        tx.drop_lease(job_id, change.attempt)

"""Pulling, releasing and reading the emergency brake, ordered against workers' claims."""

from __future__ import annotations

import uuid
from typing import Any

from sqlalchemy import Connection, false, func, select

from ledger.brake_view import BrakeView
from ledger.brakes import parse_scope
from ledger.codes import Status
from ledger.errors import LedgerError
from ledger.events import BrakePulled, BrakeReleased, NewEvent
from ledger.persistence.locks import BRAKE_LOCK_KEY, lock_exclusive
from ledger.persistence.schema import brakes, jobs
from ledger.persistence.store import NO_STREAM, EventStore


class BrakeNotFoundError(LedgerError):
    """No brake with this id, or it is already released."""


def brake_stream(brake_id: str) -> str:
    return f"brake-{brake_id}"


def pull(store: EventStore, scope: str, reason: str, operator: str) -> BrakeView:
    """Pull a brake. Once this returns, no job in its scope starts (DESIGN §5)."""
    scope = parse_scope(scope)
    if not reason.strip():
        raise LedgerError("a brake needs a reason")
    brake_id = str(uuid.uuid4())
    payload = BrakePulled(brake_id=brake_id, scope=scope, reason=reason, operator=operator)
    with store.transaction() as tx:
        lock_exclusive(tx.conn, BRAKE_LOCK_KEY)
        tx.append(brake_stream(brake_id), [NewEvent(payload=payload, actor=operator)], NO_STREAM)
        return _load(tx.conn, brake_id)


def release(store: EventStore, brake_id: str, reason: str, operator: str) -> BrakeView:
    payload = BrakeReleased(brake_id=brake_id, reason=reason, operator=operator)
    with store.transaction() as tx:
        current = _find(tx.conn, brake_id)
        if current is None or not current.active:
            state = "already released" if current else "unknown"
            raise BrakeNotFoundError(f"brake {brake_id} is {state}")
        tx.append(brake_stream(brake_id), [NewEvent(payload=payload, actor=operator)], 1)
        return _load(tx.conn, brake_id)


def active_brakes(conn: Connection) -> list[BrakeView]:
    query = select(brakes.c.view).where(brakes.c.active.is_(True))
    views = [BrakeView.model_validate(row.view) for row in conn.execute(query)]
    return sorted(views, key=lambda b: (b.pulled_at, b.brake_id))


def list_active(store: EventStore) -> list[BrakeView]:
    with store.reading() as conn:
        return active_brakes(conn)


def _find(conn: Connection, brake_id: str) -> BrakeView | None:
    row = conn.execute(select(brakes.c.view).where(brakes.c.brake_id == brake_id)).first()
    return BrakeView.model_validate(row.view) if row else None


def _load(conn: Connection, brake_id: str) -> BrakeView:
    view = _find(conn, brake_id)
    assert view is not None  # written in this transaction
    return view


def waiting_jobs(conn: Connection, scope: str, account: str | None = None) -> int:
    """Jobs a brake holds back now: open and not running (queued or waiting to retry), in its
    scope and, for a token scoped to one account, in that account only."""
    query = select(func.count()).where(
        jobs.c.terminal == false(),
        jobs.c.status.in_([Status.QUEUED.value, Status.RETRYING.value]),
    )
    kind, _, name = scope.partition(":")
    if kind == "tool":
        query = query.where(jobs.c.tool == name)
    elif kind == "account":
        query = query.where(jobs.c.account == name)
    if account is not None:
        query = query.where(jobs.c.account == account)
    return int(conn.execute(query).scalar_one())


def brake_listing(conn: Connection, account: str | None = None) -> list[dict[str, Any]]:
    """The items of `GET /v1/brakes` and `outcomes brake status --json`.

    Seen from one account: the brakes that hold its jobs (global, any tool's, its own
    account's), counting only its own jobs; other accounts' names and queues stay hidden."""
    return [
        {
            "brake_id": b.brake_id,
            "scope": b.scope,
            "reason": b.reason,
            "operator": b.operator,
            "pulled_at": b.pulled_at,
            "queued_jobs": waiting_jobs(conn, b.scope, account),
        }
        for b in active_brakes(conn)
        if account is None or not b.scope.startswith("account:") or b.scope == f"account:{account}"
    ]

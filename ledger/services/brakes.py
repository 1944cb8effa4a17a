"""Pulling, releasing and listing the emergency brake, ordered against workers' claims."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from ledger import event_log
from ledger.brake_view import BrakeView
from ledger.brakes import brake_stream, parse_scope
from ledger.errors import BrakeNotFoundError, RequestError
from ledger.events import BrakePulled, BrakeReleased, NewEvent
from ledger.persistence.appends import NO_STREAM
from ledger.persistence.base import BRAKES_LOCK
from ledger.queries import BrakeHold
from ledger.runtime.ledger import Ledger
from ledger.uuid7 import new_id


def pull(ledger: Ledger, scope: str, reason: str, operator: str) -> BrakeView:
    """Pull a brake. Once this returns, no job in its scope starts (contract §5)."""
    scope = parse_scope(scope)
    if not reason.strip():
        raise RequestError("a brake needs a reason")
    brake_id = new_id()
    payload = BrakePulled(brake_id=brake_id, scope=scope, reason=reason, operator=operator)
    with ledger.store.transaction() as tx:
        tx.lock(BRAKES_LOCK)  # exclusive: waits for claims in flight, then holds new ones
        event = NewEvent(payload=payload, actor=operator)
        pulled = tx.append(brake_stream(brake_id), [event], NO_STREAM).brake
    event_log.brake(pulled, "pulled")
    return pulled


def unknown_scope(ledger: Ledger, scope: str, tools: Iterable[str] = ()) -> str | None:
    """Why `scope` names nothing known, or None: a tool that neither `tools` (this process's)
    nor any job of the ledger names, an account no token belongs to. A brake on one holds
    nothing (issue 47: `tool:nope.x` was pulled, and held nothing)."""
    scope = parse_scope(scope)
    kind, _, name = scope.partition(":")
    with ledger.store.reading() as reads:
        if kind == "tool":
            known = set(tools) | {count.tool for count in reads.count_jobs()}
            if name not in known:
                return f"no tool {name!r} is loaded here or named by any job"
        elif kind == "account" and name not in {t.account for t in reads.tokens()}:
            return f"no token belongs to account {name!r}"
    return None


def release(ledger: Ledger, brake_id: str, reason: str, operator: str) -> BrakeView:
    payload = BrakeReleased(brake_id=brake_id, reason=reason, operator=operator)
    with ledger.store.transaction() as tx:
        # Exclusive, as a pull takes it: a claim or a submit checking brakes sees the release
        # whole or not at all.
        tx.lock(BRAKES_LOCK)
        current = tx.brake(brake_id)
        if current is None or not current.active:
            state = "already released" if current else "unknown"
            raise BrakeNotFoundError(f"brake {brake_id} is {state}")
        event = NewEvent(payload=payload, actor=operator)
        released = tx.append(brake_stream(brake_id), [event], 1).brake
    event_log.brake(released, "released")
    return released


def active(ledger: Ledger) -> list[BrakeView]:
    with ledger.store.reading() as reads:
        return reads.active_brakes()


@dataclass(frozen=True)
class BrakeRecord:
    """A brake, active or released, with the jobs it held: those it refused or halted, and,
    while it holds, those it keeps waiting now (the console's brakes page)."""

    brake: BrakeView
    held: int
    waiting: int | None  # None: released, nothing waits on it


def history(ledger: Ledger, account: str | None = None, limit: int = 50) -> list[BrakeRecord]:
    """Active and past brakes, the most recently changed first, as `holds` scopes them: seen
    from one account, the brakes that concern it, counting only its own jobs."""
    with ledger.store.reading() as reads:
        found = [b for b in reads.recent_brakes(limit) if _concerns(b, account)]
        held = reads.jobs_held([b.brake_id for b in found], account)
        return [
            BrakeRecord(
                b,
                held.get(b.brake_id, 0),
                reads.waiting_jobs(b.scope, account) if b.active else None,
            )
            for b in found
        ]


def _concerns(brake: BrakeView, account: str | None) -> bool:
    return (
        account is None
        or not brake.scope.startswith("account:")
        or brake.scope == f"account:{account}"
    )


def holds(ledger: Ledger, account: str | None = None) -> list[BrakeHold]:
    """The brakes that hold now, each with the jobs it keeps waiting (`GET /v1/brakes`,
    `outcomes brake status`). Seen from one account: the brakes that hold its jobs (global,
    any tool's, its own account's), counting only its own jobs; other accounts' names and
    queues stay hidden."""
    with ledger.store.reading() as reads:
        return [
            BrakeHold(b, reads.waiting_jobs(b.scope, account))
            for b in reads.active_brakes()
            if _concerns(b, account)
        ]

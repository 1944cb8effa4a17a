"""Turns (docs/turns.md): what a whole turn of an agent's calls did, and its halt.

A call names its turn (`Outcomes-Turn`; over MCP `_meta["outcomes/turn"]`, or the MCP
session). `report` reads the account's calls of that turn. With `Outcomes-Turn-Halt:
on-failure`, the first failed or unknown call of a spending tool in the turn pulls a brake
scoped `turn:<account>/<turn>`, once: every later call of the turn is refused
`BRAKE_ENGAGED` naming it, and a queued one is halted at its claim. It is pulled when the
turn's next call that asks to halt is submitted, and by the reconciler's pass
(`halt_failed_turns`) for calls already queued; released by an operator (`outcomes brake
release`) or the agent (`DELETE /v1/turns/{id}/halt`).
"""

from __future__ import annotations

from datetime import timedelta

from ledger import turns
from ledger.brake_view import BrakeView
from ledger.brakes import turn_scope
from ledger.clock import now
from ledger.codes import Status
from ledger.decisions import check_turn
from ledger.errors import TurnNotFoundError
from ledger.job_view import JobView
from ledger.queries import JobFilter
from ledger.runtime.ledger import Ledger
from ledger.services import brakes

MAX_CALLS = 1000  # calls a report reads at most (`truncated` beyond)
HALT_OPERATOR = "turn-halt"  # the brake's operator when a turn halts itself
SCAN_S = 86400.0  # the reconciler looks for halting failures among jobs created this recently
SCAN_LIMIT = 1000


def calls(ledger: Ledger, account: str, turn_id: str) -> tuple[list[JobView], bool]:
    """The account's calls in this turn (at most MAX_CALLS) and whether there were more."""
    check_turn(turn_id)
    where = JobFilter(account=account, turn=turn_id, limit=MAX_CALLS + 1)
    with ledger.store.reading() as reads:
        found = reads.jobs(where)
    return found[:MAX_CALLS], len(found) > MAX_CALLS


def report(ledger: Ledger, account: str, turn_id: str) -> turns.TurnReport:
    found, truncated = calls(ledger, account, turn_id)
    if not found:
        raise TurnNotFoundError(turn_id)
    with ledger.store.reading() as reads:
        halts = reads.brakes_in_scope(turn_scope(account, turn_id))
    return turns.report(turn_id, found, halts, truncated)


def halt_if_failed(ledger: Ledger, account: str, turn_id: str) -> BrakeView | None:
    """Pull the turn's brake if it asked to halt and one of its spending calls failed (or its
    outcome is unknown), unless it was pulled before (a turn halts once: released, it stays
    released). The brake that now holds the turn, if any."""
    scope = turn_scope(account, check_turn(turn_id))
    with ledger.store.reading() as reads:
        before = reads.brakes_in_scope(scope)
    if before:  # halted before: the brake still holding, if it does
        active = [b for b in before if b.active]
        return active[0] if active else None
    found, _ = calls(ledger, account, turn_id)
    failed = turns.first_halting_failure(found)
    if failed is None:
        return None
    return _pull(ledger, scope, turn_id, failed)


def _pull(ledger: Ledger, scope: str, turn_id: str, failed: JobView) -> BrakeView:
    code = failed.code.value if failed.code else failed.status.value
    reason = (
        f"turn {turn_id} halted on failure: call {failed.job_id} ({failed.tool}) ended {code}; "
        "review the turn before going on"
    )
    return brakes.pull(ledger, scope, reason, HALT_OPERATOR)


def release_halt(
    ledger: Ledger, account: str, turn_id: str, by: str, reason: str
) -> list[BrakeView]:
    """Release the turn's active brakes (the agent's own `DELETE /v1/turns/{id}/halt`, or an
    operator); the brakes released (none: nothing held the turn)."""
    check_turn(turn_id)
    with ledger.store.reading() as reads:
        held = [b for b in reads.brakes_in_scope(turn_scope(account, turn_id)) if b.active]
    return [brakes.release(ledger, b.brake_id, reason, by) for b in held]


def halt_failed_turns(ledger: Ledger) -> list[BrakeView]:
    """The reconciler's share: halt the turns whose spending calls failed since the last day,
    so their calls already queued are held at their claim too."""
    where = JobFilter(
        status=Status.FAILED.value,
        spends=True,
        since=now() - timedelta(seconds=SCAN_S),
        limit=SCAN_LIMIT,
        newest_first=True,
    )
    with ledger.store.reading() as reads:
        failed = [v for v in reads.jobs(where) if v.turn is not None and v.turn_halt]
    pulled = []
    for account, turn_id in sorted({(v.account, v.turn) for v in failed if v.turn is not None}):
        brake = halt_if_failed(ledger, account, turn_id)
        if brake is not None:
            pulled.append(brake)
    return pulled

"""The emergency brake's rules (contract §5): scopes, and which brakes hold a job."""

from __future__ import annotations

import re
from collections.abc import Iterable

from ledger.brake_view import BrakeView
from ledger.codes import Code
from ledger.error_info import ErrorInfo, sentence
from ledger.errors import InvalidScopeError

# A turn's brake (docs/turns.md) names its account: agents choose turn ids, and one account's
# turn must never hold another's.
_SCOPE = re.compile(
    r"global|tool:[a-z][a-z0-9_.]*|account:[a-z0-9][a-z0-9_-]*"
    r"|turn:[a-z0-9][a-z0-9_-]*/[A-Za-z0-9][A-Za-z0-9._:-]{0,127}"
)


def brake_stream(brake_id: str) -> str:
    return f"brake-{brake_id}"


def parse_scope(scope: str) -> str:
    scope = scope.strip()
    if not _SCOPE.fullmatch(scope):
        raise InvalidScopeError(
            f"brake scope {scope!r} must be 'global', 'tool:<name>', 'account:<id>' or "
            "'turn:<account>/<turn id>'"
        )
    return scope


def turn_scope(account: str, turn: str) -> str:
    """The scope of a turn's brake (`Outcomes-Turn-Halt`, docs/turns.md)."""
    return f"turn:{account}/{turn}"


def scopes_for(tool: str, account: str, turn: str | None = None) -> tuple[str, ...]:
    """Every scope whose brake holds a job of this tool and account (and turn)."""
    scopes = ("global", f"tool:{tool}", f"account:{account}")
    return scopes if turn is None else (*scopes, turn_scope(account, turn))


def holding(
    brakes: Iterable[BrakeView], tool: str, account: str, turn: str | None = None
) -> list[BrakeView]:
    """The active brakes that hold this job, oldest first."""
    scopes = set(scopes_for(tool, account, turn))
    found = [b for b in brakes if b.active and b.scope in scopes]
    return sorted(found, key=lambda b: (b.pulled_at, b.brake_id))


def brake_error(brake: BrakeView) -> ErrorInfo:
    if brake.scope.startswith("turn:"):
        turn = brake.scope.partition("/")[2]
        return ErrorInfo(
            code=Code.BRAKE_ENGAGED,
            dependency="ledger",
            operation="run the tool",
            retryable=False,
            fix=f"review the turn (GET /v1/turns/{turn}) and report what already happened; "
            f"to go on, release its halt (DELETE /v1/turns/{turn}/halt) or ask an operator to "
            f"release brake {brake.brake_id}",
            message=f"This turn was halted after a failure: {sentence(brake.reason)}",
            cause=brake.brake_id,
        )
    return ErrorInfo(
        code=Code.BRAKE_ENGAGED,
        dependency="ledger",
        operation="run the tool",
        retryable=False,
        fix=f"wait until an operator releases brake {brake.brake_id} ({brake.scope})",
        # The reason is the operator's words: ended as a sentence, so that whatever follows
        # the message (MCP's text: "… Fix: …") does not run into it.
        message=f"An operator stopped this work: {sentence(brake.reason)}",
        cause=brake.brake_id,
    )

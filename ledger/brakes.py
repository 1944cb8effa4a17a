"""The emergency brake's rules (contract §5): scopes, and which brakes hold a job."""

from __future__ import annotations

import re
from collections.abc import Iterable

from ledger.brake_view import BrakeView
from ledger.codes import Code
from ledger.error_info import ErrorInfo, sentence
from ledger.errors import InvalidScopeError

_SCOPE = re.compile(r"global|tool:[a-z][a-z0-9_.]*|account:[a-z0-9][a-z0-9_-]*")


def brake_stream(brake_id: str) -> str:
    return f"brake-{brake_id}"


def parse_scope(scope: str) -> str:
    scope = scope.strip()
    if not _SCOPE.fullmatch(scope):
        raise InvalidScopeError(
            f"brake scope {scope!r} must be 'global', 'tool:<name>' or 'account:<id>'"
        )
    return scope


def scopes_for(tool: str, account: str) -> tuple[str, ...]:
    """Every scope whose brake holds a job of this tool and account."""
    return ("global", f"tool:{tool}", f"account:{account}")


def holding(brakes: Iterable[BrakeView], tool: str, account: str) -> list[BrakeView]:
    """The active brakes that hold this job, oldest first."""
    scopes = set(scopes_for(tool, account))
    found = [b for b in brakes if b.active and b.scope in scopes]
    return sorted(found, key=lambda b: (b.pulled_at, b.brake_id))


def brake_error(brake: BrakeView) -> ErrorInfo:
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

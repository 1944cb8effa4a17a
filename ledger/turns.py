"""What a whole turn did (docs/turns.md): the calls an agent made under one `Outcomes-Turn`,
told as one report (pure: the views in, the report out).

"When an assistant works through dozens of your tools in a single turn, there is no transaction
around them. Everything before the failure has already happened, and the turn can still end by
reporting success." The report never reads `all_succeeded` unless every call ended and each
succeeded or was declined on purpose, and it names what already happened.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from ledger.brake_view import BrakeView
from ledger.codes import Code, NextAction, Status
from ledger.error_info import ErrorInfo
from ledger.job_view import JobView

DONE_WELL = frozenset({Status.SUCCEEDED, Status.DECLINED})
FAILURES = frozenset({Status.FAILED, Status.REFUSED})
# The order the summary tells the statuses in.
_TOLD = (
    (Status.SUCCEEDED, "succeeded"),
    (Status.DECLINED, "declined"),
    (Status.PARTIAL, "partial"),
    (Status.FAILED, "failed"),
    (Status.REFUSED, "refused"),
    (Status.AWAITING_APPROVAL, "awaiting approval"),
)
_OPEN_WORDS = "still running"


class TurnCall(BaseModel):
    model_config = ConfigDict(frozen=True)

    job_id: str
    tool: str
    status: Status
    code: Code | None
    next_action: NextAction


class TurnFailure(BaseModel):
    model_config = ConfigDict(frozen=True)

    job_id: str
    tool: str
    error: ErrorInfo | None
    next_action: NextAction


class TurnHalt(BaseModel):
    """The turn's brake (`Outcomes-Turn-Halt: on-failure`), when one was pulled."""

    model_config = ConfigDict(frozen=True)

    brake_id: str
    scope: str
    active: bool
    reason: str


class TurnReport(BaseModel):
    """`GET /v1/turns/{turn_id}`."""

    turn_id: str
    calls: list[TurnCall]
    counts: dict[str, int] = Field(description="Calls by status")
    complete: bool = Field(description="Every call has ended")
    all_succeeded: bool = Field(
        description="Every call ended, and each succeeded or was declined: the only reading "
        "that lets a turn report success"
    )
    already_happened: list[str] = Field(
        description="Calls whose work ran or may have run: succeeded, partial, or "
        "OUTCOME_MISSING on a spending tool"
    )
    first_failure: TurnFailure | None
    summary: str
    halt: TurnHalt | None = None
    truncated: bool = False


def in_order(views: Sequence[JobView]) -> list[JobView]:
    """The calls as the agent made them (their decisions' order)."""
    return sorted(views, key=lambda v: (v.created_at, v.job_id))


def report(
    turn_id: str,
    views: Sequence[JobView],
    halts: Sequence[BrakeView] = (),
    truncated: bool = False,
) -> TurnReport:
    calls = in_order(views)
    counts = Counter(v.status.value for v in calls)
    complete = all(v.terminal for v in calls)
    failed = next((v for v in calls if v.status in FAILURES), None)
    first_failure = None
    if failed is not None:
        first_failure = TurnFailure(
            job_id=failed.job_id,
            tool=failed.tool,
            error=failed.error,
            next_action=failed.next_action,
        )
    halt = _halt(halts)
    return TurnReport(
        turn_id=turn_id,
        calls=[
            TurnCall(
                job_id=v.job_id,
                tool=v.tool,
                status=v.status,
                code=v.code,
                next_action=v.next_action,
            )
            for v in calls
        ],
        counts=dict(sorted(counts.items())),
        complete=complete,
        all_succeeded=bool(calls) and complete and all(v.status in DONE_WELL for v in calls),
        already_happened=[v.job_id for v in calls if happened(v)],
        first_failure=first_failure,
        summary=summary(calls, halt),
        halt=halt,
        truncated=truncated,
    )


def happened(view: JobView) -> bool:
    """The call's work ran, or may have: what an agent must not pretend was undone."""
    if view.status in (Status.SUCCEEDED, Status.PARTIAL):
        return True
    return view.status is Status.FAILED and view.code is Code.OUTCOME_MISSING and view.spends


def first_halting_failure(views: Sequence[JobView]) -> JobView | None:
    """The first failed or unknown call of a spending tool, in a turn that asked to halt."""
    if not any(v.turn_halt for v in views):
        return None
    return next((v for v in in_order(views) if v.spends and v.status is Status.FAILED), None)


def summary(calls: Sequence[JobView], halt: TurnHalt | None = None) -> str:
    """One readable sentence: "6 calls: 4 succeeded, 1 failed (SOURCE_UNRELIABLE in
    payments.charge: stop and report), 1 still running"."""
    if not calls:
        return "No calls."
    parts = []
    for status, words in _TOLD:
        group = [v for v in calls if v.status is status]
        if not group:
            continue
        part = f"{len(group)} {words}"
        if status in FAILURES:
            first = group[0]
            code = first.code.value if first.code else status.value
            part += f" ({code} in {first.tool}: {_words(first.next_action)})"
        parts.append(part)
    running = [v for v in calls if not v.terminal and v.status is not Status.AWAITING_APPROVAL]
    if running:
        parts.append(f"{len(running)} {_OPEN_WORDS}")
    noun = "call" if len(calls) == 1 else "calls"
    told = f"{len(calls)} {noun}: {', '.join(parts)}"
    if halt is not None and halt.active:
        told += f"; the turn is halted (brake {halt.brake_id})"
    return told


def _words(action: NextAction) -> str:
    return action.value.replace("_", " ")


def _halt(halts: Sequence[BrakeView]) -> TurnHalt | None:
    if not halts:
        return None
    active = [b for b in halts if b.active]
    brake = active[0] if active else halts[-1]
    return TurnHalt(
        brake_id=brake.brake_id, scope=brake.scope, active=brake.active, reason=brake.reason
    )


def as_json(report_: TurnReport) -> dict[str, Any]:
    return report_.model_dump(mode="json")

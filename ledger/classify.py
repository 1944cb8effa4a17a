"""From what a tool did to the one event that records it (pure; contract §3, §4).

A deliberate refusal (`ToolFailure`) and an unexpected crash land in the same handler but never
in the same code: a crash is `TOOL_CRASHED`, so reading the record tells them apart.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from ledger.budget import Fitted, fit
from ledger.codes import Code, OutcomeMissingCause
from ledger.error_info import ErrorInfo
from ledger.errors import AwaitableReturned, BrakeEngaged, DeadlineExceeded
from ledger.events import (
    JobOutcomeMissing,
    Payload,
    WorkDeclined,
    WorkFailed,
    WorkHalted,
    WorkPartial,
    WorkRetryScheduled,
    WorkSucceeded,
)
from ledger.outcomes import Declined, Partial, Succeeded, ToolFailure
from ledger.scrub import scrub, scrub_value

BACKOFF_BASE_S = 1.0
BACKOFF_CAP_S = 60.0


@dataclass(frozen=True)
class Attempt:
    """What the rules need to know about the attempt that just ended."""

    tool: str
    attempt: int
    max_attempts: int
    spends: bool
    last_fingerprint: str | None
    now: datetime
    secrets: tuple[str, ...] = ()  # the job's declared secrets (`scrub.known_secrets`)


def backoff_s(attempt: int) -> float:
    return float(min(BACKOFF_CAP_S, BACKOFF_BASE_S * 2 ** (attempt - 1)))


@dataclass(frozen=True)
class Budget:
    """What an answer may take: `budget_bytes` (the tool's `max_result_bytes`, or the agent's
    smaller ask), and the tool's own maximum (to tell the agent how far it could raise it)."""

    budget_bytes: int
    tool_max: int


def outcome_event(
    value: Any, attempt: int, secrets: tuple[str, ...] = (), budget: Budget | None = None
) -> Payload:
    """A returned value: one of the three outcomes, or silence (not an outcome at all).

    Results are the tool's answer and are kept as returned, but for the job's declared secrets
    (replaced) and within the budget (cut to fit, with a note saying so: `ledger.budget`); a
    decline's reason is prose, like a failure's message, so it is scrubbed the same way."""
    if isinstance(value, Succeeded):
        fitted = _answer({"result": value.result}, secrets, budget)
        return WorkSucceeded(
            attempt=attempt, result=fitted.answer.get("result", {}), budget=fitted.note
        )
    if isinstance(value, Declined):
        reason = scrub(value.reason, secrets)
        fitted = _answer({"result": value.result}, secrets, budget)
        return WorkDeclined(
            attempt=attempt,
            reason=reason,
            result=fitted.answer.get("result", {}),
            budget=fitted.note,
        )
    if isinstance(value, Partial):
        fitted = _answer({"result": value.result, "skipped": value.skipped}, secrets, budget)
        return WorkPartial(
            attempt=attempt,
            result=fitted.answer.get("result", {}),
            processed=value.processed,
            skipped=fitted.answer.get("skipped", []),
            total=value.total,
            budget=fitted.note,
        )
    returned = type(value).__name__
    return JobOutcomeMissing(
        attempt=attempt,
        cause=OutcomeMissingCause.NO_OUTCOME_RETURNED,
        error=ErrorInfo(
            code=Code.OUTCOME_MISSING,
            dependency="tool",
            operation="report the outcome",
            fix="the tool must return Succeeded, Declined or Partial, or raise ToolFailure",
            message="The tool finished without reporting what it did; treat it as not done.",
            cause=OutcomeMissingCause.NO_OUTCOME_RETURNED.value,
        ),
        detail=scrub(f"the tool returned {returned}, not an outcome", secrets),
    )


def _answer(answer: dict[str, Any], secrets: tuple[str, ...], budget: Budget | None) -> Fitted:
    answer = scrub_value(answer, secrets)
    if budget is None:
        return Fitted(answer, None)
    return fit(answer, budget.budget_bytes, tool_max=budget.tool_max)


def failure_event(exc: BaseException, at: Attempt) -> Payload:
    """A raised exception: a brake the tool met (`BrakeEngaged`, its text scrubbed like any
    other) halts the job; anything else is retried only if retryable, not spending, attempts
    left, and the dependency's fingerprint changed since the last failure."""
    if isinstance(exc, BrakeEngaged):
        return WorkHalted(attempt=at.attempt, error=scrubbed_error(exc.error, at.secrets))
    error, fingerprint, detail = _describe(exc, at.tool, at.secrets)
    if _should_retry(error, fingerprint, at):
        due = at.now + timedelta(seconds=backoff_s(at.attempt))
        return WorkRetryScheduled(
            attempt=at.attempt, error=error, detail=detail, fingerprint=fingerprint, due_at=due
        )
    return WorkFailed(attempt=at.attempt, error=error, detail=detail, fingerprint=fingerprint)


def _should_retry(error: ErrorInfo, fingerprint: str | None, at: Attempt) -> bool:
    if at.spends or not error.retryable or at.attempt >= at.max_attempts:
        return False
    return fingerprint is None or fingerprint != at.last_fingerprint


def scrubbed_error(error: ErrorInfo, secrets: tuple[str, ...]) -> ErrorInfo:
    """An error whose text a tool wrote (a `ToolFailure`, a `BrakeEngaged` it raised itself),
    through the same scrub as exception text: every field but the code and the flags."""
    texts = {
        name: scrub(value, secrets)
        for name in _ERROR_TEXTS
        if isinstance(value := getattr(error, name), str)
    }
    return error.model_copy(update=texts)


_ERROR_TEXTS = (
    "dependency",
    "operation",
    "required_capability",
    "safe_fallback",
    "fix",
    "message",
    "cause",
)


def _describe(
    exc: BaseException, tool: str, secrets: tuple[str, ...]
) -> tuple[ErrorInfo, str | None, str | None]:
    if isinstance(exc, ToolFailure):
        fingerprint = scrub(exc.fingerprint, secrets) if exc.fingerprint is not None else None
        return scrubbed_error(exc.error_info(), secrets), fingerprint, None
    if isinstance(exc, DeadlineExceeded):
        error = ErrorInfo(
            code=Code.DEADLINE_EXCEEDED,
            dependency=tool,
            operation="run the tool",
            retryable=True,
            fix="narrow the request or raise the tool's timeout_s",
            message=f"The tool did not finish within {exc.timeout_s:g} seconds.",
        )
        return error, None, str(exc)
    if isinstance(exc, AwaitableReturned):
        error = ErrorInfo(
            code=Code.TOOL_CRASHED,
            dependency=tool,
            operation="run the tool",
            retryable=False,
            fix="declare the tool `async def` (or await inside it) so the worker awaits it",
            message="The tool handed back work it never ran; nothing it did can be trusted.",
        )
        return error, None, str(exc)
    error = ErrorInfo(
        code=Code.TOOL_CRASHED,
        dependency=tool,
        operation="run the tool",
        retryable=False,
        fix="report it to the tool's maintainers; the crash detail is in the ledger",
        message="The tool failed unexpectedly; nothing it reported can be trusted.",
    )
    return error, None, scrub(f"{type(exc).__name__}: {_text_of(exc)}", secrets)


def _text_of(exc: BaseException) -> str:
    try:
        return str(exc)
    except Exception:  # a tool's exception whose __str__ fails must still be recorded
        return "(its text could not be read)"

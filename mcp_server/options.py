"""A job tool call's own options, beside the tool's arguments: `_wait_s` (how long the call
waits for the outcome), `_idempotency_key`, `_budget_bytes` (a smaller answer than the tool's
`max_result_bytes`) and `_start_within_s` (a shorter start deadline than the tool's). Each is
declared in the tool's input schema, taken out of the arguments, and refused outside its
schema's range, never quietly bent into it (as HTTP's `start_within_s`, a value above the
tool's own deadline is capped by it: the schema says so).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from ledger import identifiers
from ledger.budget import MIN_BUDGET_BYTES
from ledger.codes import Code
from ledger.error_info import ErrorInfo
from ledger.queueing import MAX_START_WITHIN_S, MIN_START_WITHIN_S
from ledger.services import catalog

DEFAULT_WAIT_S = 30.0
MAX_WAIT_S = 60.0
WAIT_ARG = "_wait_s"
KEY_ARG = "_idempotency_key"
BUDGET_ARG = "_budget_bytes"
START_ARG = "_start_within_s"


@dataclass(frozen=True)
class Options:
    wait_s: float
    key: str | None
    budget_bytes: int | None
    start_within_s: float | None


def option_schemas(entry: catalog.ToolEntry) -> dict[str, dict[str, Any]]:
    """The options' JSON Schemas, to add to the tool's input schema."""
    return {
        WAIT_ARG: {
            "type": "number",
            "minimum": 0,
            "maximum": MAX_WAIT_S,
            "default": DEFAULT_WAIT_S,
            "description": "Seconds to wait for the outcome before answering with the job id",
        },
        KEY_ARG: {
            "type": "string",
            "minLength": 1,
            "maxLength": 200,
            "pattern": identifiers.PATTERN,
            "description": "Idempotency key: the same key and arguments answer the same job "
            "(no control, bidirectional or zero-width characters)",
        },
        BUDGET_ARG: {
            "type": "integer",
            "minimum": MIN_BUDGET_BYTES,
            "maximum": entry.max_result_bytes,
            "default": entry.max_result_bytes,
            "description": "The most the answer may take, as JSON bytes: a bigger one comes "
            "back cut to fit, and its `budget` says what was left out and how to narrow",
        },
        START_ARG: {
            "type": "number",
            "minimum": MIN_START_WITHIN_S,
            "maximum": MAX_START_WITHIN_S,
            "default": entry.start_within_s,
            "description": "Seconds the job may wait for a worker before it ends "
            f"OUTCOME_MISSING (never_started); at most this tool's {entry.start_within_s:g} "
            "(a longer one is capped). A queue that could not start it in time refuses it at "
            "once (QUOTA_EXCEEDED, cause backlog, retry_after_s)",
        },
    }


def options_of(arguments: dict[str, Any]) -> Options | ErrorInfo:
    """The call's options, taken out of `arguments`; the first one out of range refused."""
    wait_s = _wait(arguments.pop(WAIT_ARG, DEFAULT_WAIT_S))
    key = _key(arguments.pop(KEY_ARG, None))
    budget = _budget(arguments.pop(BUDGET_ARG, None))
    start = _start(arguments.pop(START_ARG, None))
    for option in (wait_s, key, budget, start):
        if isinstance(option, ErrorInfo):
            return option
    assert isinstance(wait_s, float) and not isinstance(key, ErrorInfo)
    assert not isinstance(budget, ErrorInfo) and not isinstance(start, ErrorInfo)
    return Options(wait_s, key, budget, start)


def _number(value: Any) -> bool:
    return not isinstance(value, bool) and isinstance(value, int | float) and math.isfinite(value)


def _wait(value: Any) -> float | ErrorInfo:
    if _number(value) and 0 <= value <= MAX_WAIT_S:
        return float(value)
    return _option_invalid(WAIT_ARG, f"a number of seconds from 0 to {MAX_WAIT_S:g}")


def _key(value: Any) -> str | ErrorInfo | None:
    if value is None:
        return None
    if not (isinstance(value, str) and 0 < len(value) <= 200):
        return _option_invalid(KEY_ARG, "a string of 1 to 200 characters")
    if (reason := identifiers.problem(KEY_ARG, value)) is not None:
        return ErrorInfo(
            code=Code.INPUT_INVALID,
            operation="read the call's options",
            fix=f"pass {KEY_ARG} as visible characters only, or leave it out",
            message=f"{reason}; nothing was submitted.",
        )
    return value


def _budget(value: Any) -> int | ErrorInfo | None:
    """A whole number of bytes (its range is the tool's: the decision checks it, and a budget
    out of it is a recorded refusal like any argument out of the schema)."""
    if value is None:
        return None
    if isinstance(value, float) and value.is_integer():
        value = int(value)  # JSON has numbers, not integers: 4096.0 is 4096
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    return _option_invalid(BUDGET_ARG, "a whole number of bytes")


def _start(value: Any) -> float | ErrorInfo | None:
    if value is None:
        return None
    if _number(value) and MIN_START_WITHIN_S <= value <= MAX_START_WITHIN_S:
        return float(value)
    return _option_invalid(
        START_ARG, f"a number of seconds from {MIN_START_WITHIN_S:g} to {MAX_START_WITHIN_S:g}"
    )


def _option_invalid(name: str, expected: str) -> ErrorInfo:
    return ErrorInfo(
        code=Code.INPUT_INVALID,
        operation="read the call's options",
        fix=f"pass {name} as {expected}, or leave it out",
        message=f"{name} must be {expected}; nothing was submitted.",
    )

"""What a tool returns (or raises): the tool authors' side of the outcome contract (DESIGN §4).

A tool returns `Succeeded`, `Declined` or `Partial`, or raises `ToolFailure`. Anything else it
returns is not an outcome and is recorded as `OUTCOME_MISSING` (`no_outcome_returned`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ledger.codes import TOOL_FAILURE_CODES, Code
from ledger.error_info import ErrorInfo


@dataclass(frozen=True)
class Succeeded:
    """The work was done; `result` is what the agent reads."""

    result: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Declined:
    """Success, nothing done on purpose, and why (the state is already what was wanted)."""

    reason: str
    result: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Partial:
    """Some of the work was done: the result, how many were processed, what was skipped."""

    result: dict[str, Any]
    processed: int
    skipped: list[str] = field(default_factory=list)
    total: int | None = None


Outcome = Succeeded | Declined | Partial


class ToolFailure(Exception):
    """A deliberate, typed failure: what broke, and what would unblock it.

    `fingerprint` identifies the dependency's state (config or credentials version): two
    consecutive failures with the same fingerprint stop the retries.
    """

    def __init__(
        self,
        *,
        code: Code | str,
        dependency: str,
        operation: str,
        retryable: bool = False,
        required_capability: str | None = None,
        safe_fallback: str | None = None,
        fix: str | None = None,
        message: str,
        fingerprint: str | None = None,
        retry_after_s: int | None = None,
    ) -> None:
        self.code = Code(code)
        if self.code not in TOOL_FAILURE_CODES and self.code is not Code.QUOTA_EXCEEDED:
            raise ValueError(f"a tool may not raise the ledger's own code {self.code}")
        super().__init__(f"{self.code}: {message}")
        self.dependency = dependency
        self.operation = operation
        self.retryable = retryable
        self.required_capability = required_capability
        self.safe_fallback = safe_fallback
        self.fix = fix
        self.message = message
        self.fingerprint = fingerprint
        self.retry_after_s = retry_after_s

    def error_info(self) -> ErrorInfo:
        return ErrorInfo(
            code=self.code,
            dependency=self.dependency,
            operation=self.operation,
            retryable=self.retryable,
            required_capability=self.required_capability,
            safe_fallback=self.safe_fallback,
            fix=self.fix,
            message=self.message,
            retry_after_s=self.retry_after_s,
        )

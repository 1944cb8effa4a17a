"""Exceptions outside the ledger's tree, because they are not failures of the ledger: a
tool's deliberate failure, how a running tool is stopped, and a job stream out of order."""

from __future__ import annotations

from ledger.codes import TOOL_FAILURE_CODES, Code
from ledger.error_info import ErrorInfo


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


class BrakeEngaged(Exception):
    """A brake was pulled while the tool ran; stop between steps (or return a Partial)."""

    def __init__(self, error: ErrorInfo) -> None:
        super().__init__(error.message)
        self.error = error


class DeadlineExceeded(Exception):
    """The tool ran past its `timeout_s`."""

    def __init__(self, timeout_s: float) -> None:
        super().__init__(f"the tool ran past its {timeout_s:g} s deadline")
        self.timeout_s = timeout_s


class AwaitableReturned(Exception):
    """A tool returned an awaitable (a `def` returning a coroutine, an `async def` that forgot an
    `await`): its work never ran to an outcome, so it is a failure, never a success."""

    def __init__(self, returned: str) -> None:
        super().__init__(f"the tool returned {returned} instead of an outcome (never awaited)")
        self.returned = returned


class JobStreamError(ValueError):
    """A job stream whose events are out of the contract's order (a bug, never user input)."""

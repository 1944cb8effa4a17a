"""The `error` object of the outcome envelope (contract §3): ten keys, always all present."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from ledger.codes import Code


class ErrorInfo(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    code: Code
    dependency: str | None = None
    operation: str | None = None
    retryable: bool = False
    required_capability: str | None = None
    safe_fallback: str | None = None
    fix: str | None = None
    # What an agent may show a person: never secrets, raw provider text or stack traces.
    message: str
    retry_after_s: int | None = None
    cause: str | None = None

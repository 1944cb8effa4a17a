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


_ENDS = (".", "!", "?", "…")


def sentence(text: str) -> str:
    """`text` as a sentence that ends with its punctuation: what precedes a fix ("… Fix: …")
    must not run into it. Trailing spaces and a dangling `,`, `;` or `:` give way to a period."""
    text = text.rstrip()
    if not text or text.endswith(_ENDS):
        return text
    return text.rstrip(",;:").rstrip() + "."

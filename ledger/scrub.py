"""Remove secrets from text that operators and auditors will read (exception text, details).

No secret leaves the ledger through any interface (contract §3): tokens, keys, passwords and
URLs' credentials are replaced before anything is recorded.
"""

from __future__ import annotations

import re

REDACTED = "[REDACTED]"

_PATTERNS = [
    # scheme://user:password@host → keep the scheme and host
    (re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://)[^\s/@:]*:[^\s/@]*@"), rf"\1{REDACTED}@"),
    (re.compile(r"(?i)\b(bearer|basic|token)\s+[A-Za-z0-9._~+/=-]{8,}"), rf"\1 {REDACTED}"),
    (
        re.compile(
            r"(?i)\b(password|passwd|pwd|secret|token|api[_-]?key|access[_-]?key|"
            r"client[_-]?secret|authorization|auth)(\s*[=:]\s*|\"\s*:\s*\"|'\s*:\s*')"
            r"[^\s,;&\"'}]+"
        ),
        rf"\1\2{REDACTED}",
    ),
    (re.compile(r"\bol_[A-Za-z0-9_-]{16,}"), REDACTED),  # this ledger's own API tokens
    (re.compile(r"\bsk-[A-Za-z0-9_-]{16,}"), REDACTED),
    (re.compile(r"\b(AKIA|ASIA)[A-Z0-9]{16}\b"), REDACTED),
    (re.compile(r"\bgh[pousr]_[A-Za-z0-9]{20,}"), REDACTED),
    (re.compile(r"\bxox[abposr]-[A-Za-z0-9-]{10,}"), REDACTED),
    (re.compile(r"\beyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}"), REDACTED),
]

MAX_DETAIL = 2000


def scrub(text: str, extra_secrets: tuple[str, ...] = ()) -> str:
    """Replace known secret shapes, and any literal `extra_secrets`, then bound the length."""
    for secret in extra_secrets:
        if len(secret) >= 4:
            text = text.replace(secret, REDACTED)
    for pattern, replacement in _PATTERNS:
        text = pattern.sub(replacement, text)
    if len(text) > MAX_DETAIL:
        text = text[:MAX_DETAIL] + "…"
    return text

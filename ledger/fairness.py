"""Per-account fairness (docs/fairness.md): what one account may take of the ledger at once.

- a submit rate (a token bucket per account, kept in the database, so every API process
  draws on the same bucket): a call over it is refused before anything is written;
- a concurrency limit at claim (the account's live leases, counted across the fleet): a job
  of an account at its limit is deferred, its message published again a moment later;
- a dispatch window (messages of one account queued in the broker at once): the rest wait,
  accepted, in the ledger, and are published as the account's jobs start.

Pure: the limits and the refusal's words. The use cases apply them (`services.submit`,
`services.work`, `runtime.outbox`)."""

from __future__ import annotations

import math
from dataclasses import dataclass

from ledger.codes import Code
from ledger.error_info import ErrorInfo

DEFER_S = 1.0  # a deferred job's message comes back this much later


@dataclass(frozen=True)
class Limits:
    rate_per_s: float = 0.0  # submits per second per account; 0: no rate limit
    burst: int = 0  # the bucket's size (0: one second's worth, at least 1)
    concurrency: int = 0  # running jobs per account across the fleet; 0: unlimited
    window: int = 0  # messages per account in the broker at once; 0: no window

    @property
    def bucket(self) -> int:
        return self.burst or max(1, math.ceil(self.rate_per_s))

    @property
    def rate_limited(self) -> bool:
        return self.rate_per_s > 0


def rate_refusal(account: str, limits: Limits, retry_after_s: float) -> ErrorInfo:
    """A submit over the account's rate: nothing was recorded (not even a refusal)."""
    wait = max(1, math.ceil(retry_after_s))
    return ErrorInfo(
        code=Code.QUOTA_EXCEEDED,
        dependency="ledger",
        operation="accept a submit",
        retryable=True,
        fix=f"wait {wait} s and submit again, or ask an operator for a higher rate",
        message=(
            f"Account {account!r} submits faster than its rate of {limits.rate_per_s:g} per "
            f"second (burst {limits.bucket}); nothing was recorded."
        ),
        retry_after_s=wait,
        cause="rate_limit",
    )

"""Fairness's part of the contract over the in-memory state: the same answers as
`sql_fairness.py`, read plainly."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from ledger.job_view import JobView
from ledger.persistence.memory_state import MemoryState
from ledger.queueing import WAITING


@dataclass
class Bucket:
    tokens: float
    at: float  # time.monotonic()


class MemoryFairnessReads:
    state: MemoryState

    def _account_waiting(self) -> list[JobView]:
        return [v for v in self.state.jobs.values() if not v.terminal and v.status in WAITING]

    def _confirmed(self, view: JobView) -> bool:
        found = self.state.dispatches.get(view.job_id)
        return found is not None and found.confirms(view)

    def running_by_account(self, accounts: Sequence[str], now: datetime) -> dict[str, int]:
        wanted = set(accounts)
        found: Counter[str] = Counter()
        for job_id, lease in self.state.leases.items():
            view = self.state.jobs.get(job_id)
            if view is not None and view.account in wanted and lease.expires_at > now:
                found[view.account] += 1
        return dict(found)

    def queued_by_account(self, accounts: Sequence[str]) -> dict[str, int]:
        wanted = set(accounts)
        found: Counter[str] = Counter(
            v.account for v in self._account_waiting() if v.account in wanted and self._confirmed(v)
        )
        return dict(found)

    def held_jobs(self, account: str, limit: int) -> list[JobView]:
        held = [
            v for v in self._account_waiting() if v.account == account and not self._confirmed(v)
        ]
        held.sort(key=lambda v: v.updated_at)
        return held[:limit]

    def held_accounts(self, limit: int) -> list[str]:
        found = dict.fromkeys(v.account for v in self._account_waiting() if not self._confirmed(v))
        return list(found)[:limit]


def take(buckets: dict[str, Bucket], account: str, rate_per_s: float, burst: int) -> float:
    """The bucket's take (the caller holds the store's lock)."""
    moment = time.monotonic()
    bucket = buckets.setdefault(account, Bucket(float(burst), moment))
    level = min(float(burst), bucket.tokens + max(0.0, moment - bucket.at) * rate_per_s)
    bucket.at = moment
    if level >= 1:
        bucket.tokens = level - 1
        return 0.0
    bucket.tokens = level
    return max(0.001, (1.0 - level) / rate_per_s)

"""The store's contract, fairness's part (`ledger.fairness`, docs/fairness.md): an account's
live leases (its running jobs, fleet-wide), its messages the broker holds, and its accepted
jobs still held back by the dispatch window. `Reads` and `Writes` (`ledger.persistence.base`)
take these in; each store implements them (`sql_fairness.py`, `memory_fairness.py`). The
submit rate's bucket is the store's own (`Store.take_submit_token`): one statement, outside
any transaction of the submit.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from datetime import datetime

from ledger.job_view import JobView


class FairnessReads(ABC):
    @abstractmethod
    def running_by_account(self, accounts: Sequence[str], now: datetime) -> dict[str, int]:
        """Each account's live leases (expiring after `now`): its jobs running fleet-wide.
        An account with none may be missing from the answer."""

    @abstractmethod
    def queued_by_account(self, accounts: Sequence[str]) -> dict[str, int]:
        """Each account's waiting jobs whose current message the broker confirmed: what it
        has queued in the broker. An account with none may be missing from the answer."""

    @abstractmethod
    def held_jobs(self, account: str, limit: int) -> list[JobView]:
        """The account's waiting jobs whose current message no broker confirmed, the longest
        waiting first, at most `limit`: what the dispatch window holds back."""

    @abstractmethod
    def held_accounts(self, limit: int) -> list[str]:
        """Accounts with waiting jobs no broker confirmed a message of (at most `limit`)."""

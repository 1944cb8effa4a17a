"""The store's contract, the outbox's part (`ledger.runtime.outbox`): which job's message the
broker confirmed, each queue's epoch, and the figures the outbox, the reconciler and the
backlog gauge read. `Reads` and `Writes` (`ledger.persistence.base`) take these in; each store
implements them (`sql_outbox.py`, `memory_outbox.py`), and the contract suite
(`tests/persistence/test_job_contract_outbox.py`) runs on all three.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from datetime import datetime

from ledger.job_view import JobView
from ledger.queueing import Confirmation, DispatchState, DispatchSummary


class OutboxReads(ABC):
    @abstractmethod
    def dispatch_state(self, job_id: str) -> DispatchState | None:
        """What the outbox recorded of this job's message, if anything."""

    @abstractmethod
    def undispatched_jobs(self, before: datetime, limit: int) -> list[JobView]:
        """Waiting jobs (queued or retrying) last changed before `before` whose current wait's
        message the broker has not confirmed, the longest waiting first, at most `limit`."""

    @abstractmethod
    def queue_epoch(self, queue: str) -> str | None:
        """The queue's current epoch, None before one was recorded."""

    @abstractmethod
    def dispatch_summary(self) -> DispatchSummary: ...

    @abstractmethod
    def waiting_count(self) -> int:
        """Jobs queued or retrying: the backlog ahead of a new job."""

    @abstractmethod
    def starts_between(self, after: int, upto: int) -> int:
        """`work.started` events at positions after `after`, up to `upto`."""


class OutboxWrites(ABC):
    @abstractmethod
    def record_dispatches(self, confirmed: Sequence[Confirmation]) -> None:
        """The broker confirmed these messages. Recorded for the jobs that still wait (one
        that started needs no record); a job keeps the newest version's record; a worker's
        rejection stands until a message of a later wait is confirmed (one of the wait it
        rejected, recorded late, does not clear it)."""

    @abstractmethod
    def reject_dispatch(self, job_id: str, version: int, reason: str, at: datetime) -> None:
        """A worker took a delivery of this job's wait at stream version `version` and could
        not claim it: evidence that the wait's message is gone (the reconciler sends another)."""

    @abstractmethod
    def set_queue_epoch(self, queue: str, expected: str | None, epoch: str, at: datetime) -> bool:
        """Make `epoch` the queue's current one if the current one is still `expected` (None:
        if it has none); False when another process changed it first."""

    @abstractmethod
    def prune_dispatches(self, limit: int) -> int:
        """Forget the records of at most `limit` jobs that no longer wait; how many went."""

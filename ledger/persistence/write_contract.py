"""The store's write contract: `JobWrites`, one transaction's appends, locks and savepoints,
the leases of the jobs it claims and the outbox's records (a job's way), and `Writes`, a
transaction that also takes operations' writes (`ops_contract.OpsWrites`) and answers every
read (`ledger.persistence.base`)."""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Sequence
from contextlib import AbstractContextManager
from datetime import datetime

from ledger.events import NewEvent
from ledger.persistence import job_lane
from ledger.persistence.appends import (
    Appended,
    JobAppend,
    JobAppended,
)
from ledger.persistence.ops_contract import OpsWrites
from ledger.persistence.outbox_contract import OutboxWrites
from ledger.persistence.read_contract import JobReads, Reads


class JobWrites(JobReads, OutboxWrites):
    """A job's way's write transaction: everything it does commits together or not at all."""

    @abstractmethod
    def append(
        self,
        stream_id: str,
        new_events: Sequence[NewEvent],
        expected_version: int | None = None,
    ) -> Appended:
        """Append after `expected_version` (None: after whatever the head is) and update the
        read model in the same transaction.

        Raises ConcurrencyError when the stream moved, AlreadyTerminalError on a second
        terminal job event, DuplicateEventError when an event id is already recorded,
        IdempotencyKeyTakenError when another job of the account holds the key.
        """

    def append_jobs(self, items: Sequence[JobAppend]) -> list[JobAppended]:
        """Append each item in this transaction; an item that cannot be appended reports why
        (its status) and leaves the others to commit. The general way (`job_lane`): a store
        with a one-call lane overrides it."""
        return job_lane.append_each(self, items)

    @abstractmethod
    def isolated(self) -> AbstractContextManager[None]:
        """A savepoint: what fails inside it is undone, the transaction goes on."""

    @abstractmethod
    def lock(self, *key: str, shared: bool = False) -> None:
        """Hold a named lock until this transaction ends (exclusive unless `shared`)."""

    @abstractmethod
    def start_lease(self, job_id: str, attempt: int, worker: str, expires_at: datetime) -> None:
        """The job's lease for this attempt (an earlier attempt's lease is replaced)."""

    @abstractmethod
    def renew_leases(self, held: Sequence[tuple[str, int]], expires_at: datetime) -> list[bool]:
        """Push forward the leases of these (job id, attempt) pairs, in one statement where
        the store has statements; for each pair, in order, False when the job's lease is no
        longer that attempt's."""

    @abstractmethod
    def drop_lease(self, job_id: str, attempt: int) -> None:
        """The attempt is over: its lease goes (a later attempt's lease stays)."""


class Writes(JobWrites, OpsWrites, Reads):
    """A write transaction with every write and every read, as every backend's is."""

"""The store's read contract, in two parts: `JobReads`, what a job's way through the ledger
asks of one consistent view (jobs, brakes, tokens, events, the outbox's and fairness's
reads), and `OpsReads` (`ops_contract`), what people and operations ask (reports, audit,
rebuild, the Merkle tree, webhooks). `Reads` is a view that answers both, as every backend's
does. Declared here, implemented by each backend (`ledger.persistence.base`)."""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Sequence
from datetime import datetime

from ledger.brake_view import BrakeView
from ledger.events import RecordedEvent
from ledger.job_view import JobView
from ledger.persistence.fairness_contract import FairnessReads
from ledger.persistence.ops_contract import OpsReads
from ledger.persistence.outbox_contract import OutboxReads
from ledger.queries import (
    EventFilter,
    Heads,
    JobFilter,
)
from ledger.reconcile_rules import OpenJob
from ledger.token_view import TokenView


class JobReads(OutboxReads, FairnessReads):
    """The questions a job's way asks (submit, claim, record, reconcile, an agent's read),
    answered from one consistent view of the ledger."""

    # --- jobs -----------------------------------------------------------------------------

    @abstractmethod
    def job(self, job_id: str) -> JobView | None: ...

    @abstractmethod
    def jobs_by_id(self, job_ids: Sequence[str]) -> dict[str, JobView]:
        """The views of those jobs that exist, by id."""

    @abstractmethod
    def jobs(self, where: JobFilter) -> list[JobView]:
        """Jobs that changed after `where.after` (and before `where.before`), in ledger_position
        order (descending with `newest_first`), at most `limit`, matching the filter's other
        fields (status, code, tool, created since/until, spends) where they are set."""

    @abstractmethod
    def job_by_idempotency_key(self, account: str, key: str) -> JobView | None: ...

    @abstractmethod
    def accepted_in_window(
        self, account: str, tool: str, since: datetime
    ) -> tuple[int, datetime | None]:
        """How many jobs of this account and tool were accepted after `since`, and the oldest."""

    @abstractmethod
    def job_positions(self, job_ids: Sequence[str]) -> dict[str, int]:
        """The current ledger_position of each known job (long-polls compare it to theirs)."""

    @abstractmethod
    def overdue_jobs(self, now: datetime, epoch: str | None) -> list[OpenJob]:
        """Open jobs the reconciler must judge, each with its dispatch state: waiting (queued
        or retrying) past their start deadline (or with none recorded), running with a lease
        that expired before `now`, and waiting jobs with evidence that their confirmed message
        is gone: a worker rejected it, or it was confirmed under another queue epoch than
        `epoch` (None: the queue's epoch is not known, which is no evidence)."""

    # --- brakes ---------------------------------------------------------------------------

    @abstractmethod
    def active_brakes(self) -> list[BrakeView]:
        """Brakes that hold now, oldest first."""

    @abstractmethod
    def brake(self, brake_id: str) -> BrakeView | None: ...

    @abstractmethod
    def waiting_jobs(self, scope: str, account: str | None = None) -> int:
        """Open jobs not running (queued, retrying) in this brake scope (and account)."""

    # --- tokens ---------------------------------------------------------------------------

    @abstractmethod
    def token(self, token_id: str) -> TokenView | None: ...

    @abstractmethod
    def token_by_hash(self, token_hash: str) -> TokenView | None:
        """The token with this hash, revoked or not (the caller decides)."""

    @abstractmethod
    def tokens(self) -> list[TokenView]:
        """Every token, in creation order."""

    # --- events ---------------------------------------------------------------------------

    @abstractmethod
    def read_stream(self, stream_id: str) -> list[RecordedEvent]: ...

    @abstractmethod
    def find_events(self, where: EventFilter) -> list[RecordedEvent]:
        """Events matching the filter, in position order, at most `limit`."""

    @abstractmethod
    def last_event_by(self, actor: str) -> RecordedEvent | None:
        """The latest event recorded by `actor` (e.g. the reconciler), or None."""

    @abstractmethod
    def heads(self) -> Heads: ...

    @abstractmethod
    def last_position(self) -> int:
        """The last ledger position given so far, O(1) and without a sequencer tick (the head
        now: probes, gauges, metrics). A reader that must see what committed before it asks
        takes it inside `Store.in_order`, or from `Store.last_position`, which tick first."""


class Reads(JobReads, OpsReads):
    """Every question a view of the ledger answers: a job's way's and operations'."""

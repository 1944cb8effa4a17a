"""The store's contract: every database operation the use cases need, in one place.

A `Store` opens read-only views (`reading`) and write transactions (`transaction`); what they
offer is declared here once and implemented by each backend: SQL (`ledger.persistence.sql_store`,
Postgres and SQLite) and memory (`ledger.persistence.memory`, for fast tests and as a
reference). One contract test suite runs against all of them. Nothing here decides: the
services in `ledger.services` do, and call only these methods.
"""

from __future__ import annotations

import asyncio
from abc import ABC, abstractmethod
from collections.abc import Callable, Coroutine, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from datetime import datetime
from pathlib import Path
from types import TracebackType
from typing import Any, Protocol, Self

from ledger.brake_view import BrakeView
from ledger.events import NewEvent, RecordedEvent
from ledger.job_view import JobView
from ledger.persistence import job_lane
from ledger.persistence.appends import (
    Appended,
    JobAppend,
    JobAppended,
)
from ledger.persistence.archive_contract import ArchiveStore
from ledger.persistence.audit_contract import AuditReads, AuditWrites
from ledger.persistence.fairness_contract import FairnessReads
from ledger.persistence.outbox_contract import OutboxReads, OutboxWrites
from ledger.persistence.rebuild_contract import RebuildReads, RebuildWrites
from ledger.persistence.tree_contract import TreeReads
from ledger.persistence.webhooks_contract import WebhookReads, WebhookWrites
from ledger.privileges import ConnectedRole, no_roles
from ledger.queries import (
    EventFilter,
    FindingCount,
    Heads,
    JobCount,
    JobFilter,
    JobSummary,
    MissingOutcome,
    OrderProblems,
    SequencerState,
)
from ledger.reconcile_rules import OpenJob
from ledger.token_view import TokenView

BRAKES_LOCK = job_lane.BRAKES_LOCK  # shared by claims and submits, exclusive for a pull


class Reads(OutboxReads, WebhookReads, FairnessReads, AuditReads, RebuildReads, TreeReads):
    """Questions answered from one consistent view of the ledger."""

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

    # The counts below are kept as jobs change (migration 0017, `sql_counts.py`): each costs
    # the groups it reports (and, with since/until, the jobs created in the partial hours at the
    # range's ends), never a count of every job, and equals a GROUP BY over the jobs.

    @abstractmethod
    def summarize_jobs(
        self,
        account: str | None,
        tool: str | None = None,
        since: datetime | None = None,
        until: datetime | None = None,
    ) -> JobSummary:
        """Jobs by status, code, tool and account (created since/until, of one account and
        tool where given)."""

    @abstractmethod
    def count_statuses(
        self,
        account: str | None,
        tool: str | None = None,
        since: datetime | None = None,
        until: datetime | None = None,
    ) -> dict[str, int]:
        """How many jobs hold each status (created since/until, of one account and tool where
        given): `summarize_jobs` by status alone."""

    @abstractmethod
    def count_jobs(self) -> list[JobCount]:
        """Every job counted by (accepted, status, code, tool): the metrics' ledger counts."""

    @abstractmethod
    def count_findings(self) -> list[FindingCount]:
        """The reconciler's findings (its events of the types in `ledger.event_log.FINDINGS`)
        by type and cause, each with the newest one's time."""

    @abstractmethod
    def missing_outcomes(
        self, account: str | None, since: datetime, limit: int
    ) -> list[MissingOutcome]:
        """Jobs failed with OUTCOME_MISSING whose last change is at or after `since` (of one
        account, or all: None), most recent first, at most `limit` (the console's silence)."""

    # --- brakes ---------------------------------------------------------------------------

    @abstractmethod
    def active_brakes(self) -> list[BrakeView]:
        """Brakes that hold now, oldest first."""

    @abstractmethod
    def brake(self, brake_id: str) -> BrakeView | None: ...

    @abstractmethod
    def waiting_jobs(self, scope: str, account: str | None = None) -> int:
        """Open jobs not running (queued, retrying) in this brake scope (and account)."""

    @abstractmethod
    def recent_brakes(self, limit: int) -> list[BrakeView]:
        """Brakes active or released, as the brakes read model holds them (for people to
        read, never to decide), the most recently changed first, at most `limit`."""

    @abstractmethod
    def brakes_in_scope(self, scope: str) -> list[BrakeView]:
        """Every brake ever pulled in this scope, active or released, oldest first (a turn's
        halt, docs/turns.md, is pulled once)."""

    @abstractmethod
    def jobs_held(self, brake_ids: Sequence[str], account: str | None = None) -> dict[str, int]:
        """How many jobs each of these brakes refused or halted (BRAKE_ENGAGED naming it as
        the cause), of one account or all (None); brakes that held none are left out."""

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

    # --- read models, as stored -----------------------------------------------------------

    @abstractmethod
    def read_model_rows(self, table: str, after: str | None, limit: int) -> list[dict[str, Any]]:
        """A page of a read model's stored rows (`ledger.read_models`: jobs, brakes, tokens),
        keys above `after` (None: from the first), in key order, at most `limit`: every stored
        column by name, times as aware UTC datetimes, `view` as its decoded JSON. `audit
        verify` compares them with a fold of the events, so nothing may be normalized away."""


class Writes(Reads, OutboxWrites, WebhookWrites, AuditWrites, RebuildWrites):
    """A write transaction: everything it does commits together or not at all."""

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


class SequencerLeader(Protocol):
    """A process's bid to be the one sequencer (Postgres), on a connection of its own."""

    @property
    def leading(self) -> bool: ...

    def lead(self) -> bool: ...

    def tick(self) -> int: ...

    def wait(self, timeout_s: float) -> None: ...

    def reset(self) -> None: ...

    def close(self) -> None: ...


class Listener(Protocol):
    """Wakes long-polls when jobs change (Postgres LISTEN); only ever a hint."""

    connected: asyncio.Event

    def run(self) -> Coroutine[Any, Any, None]: ...


class LoopReads(Protocol):
    """A job's read on the event loop that made it (Postgres: `loop_reads.LoopJobReads`)."""

    async def read_job(
        self, job_id: str, token_id: str | None = None
    ) -> tuple[JobView | None, bool]: ...

    async def close(self) -> None: ...


# The jobs that changed, and of those the ones that ended (a terminal event): waiters for an
# outcome only need waking for these.
OnJobs = Callable[[list[str], set[str]], None]
OnConnect = Callable[[], None]


class Store(ArchiveStore, ABC):
    """A ledger's storage. Use it as a context manager, or call `close()`. Archives and
    partitions: `ArchiveStore`."""

    dialect: str  # "postgresql", "sqlite" or "memory"

    @abstractmethod
    def transaction(self) -> AbstractContextManager[Writes]: ...

    @abstractmethod
    def reading(self) -> AbstractContextManager[Reads]:
        """A read-only view (on SQLite it does not queue behind writers)."""

    def snapshot(self) -> AbstractContextManager[Reads]:
        """A read-only view of one moment, however long it is read (`audit verify` compares
        the events with the read models: both must be of the same moment)."""
        return self.reading()

    def quick_read(self) -> AbstractContextManager[Reads]:
        """For one question only: backends may skip the transaction around it."""
        return self.reading()

    def read_job(self, job_id: str, token_id: str | None = None) -> tuple[JobView | None, bool]:
        """The agents' hottest read: a job's view and, with `token_id`, whether that token
        still stands (it exists and is not revoked), in one read. (view or None, stands)."""
        with self.quick_read() as reads:
            view = reads.job(job_id)
            if token_id is None:
                return view, True
            token = reads.token(token_id)
        return view, token is not None and not token.revoked

    def sequence(self, *, wait: bool = True) -> int:
        """One sequencer tick: the events committed so far get their ledger positions, so a
        read in ledger order that follows sees them. How many were sequenced; -1 when `wait`
        is False and another process is ticking. A store that sequences at write (SQLite,
        memory) has nothing to do: 0."""
        return 0

    @contextmanager
    def in_order(self) -> Iterator[Reads]:
        """A read transaction for reads in ledger order (a page after a position, the head, a
        digest): every event committed before it began is sequenced first."""
        self.sequence()
        with self.reading() as reads:
            yield reads

    def compact_counts(self) -> int:
        """Fold the kept counts' pending deltas into their totals (Postgres: any process may,
        two at once count nothing twice); how many delta rows, -1 when another fold was under
        way. Readers are exact either way: this keeps what they sum small. A store that keeps
        its totals directly (SQLite, memory) has nothing to do: 0."""
        return 0

    def check_ready(self) -> None:
        """Raise a `StorageError` unless this store can serve: its database answers a trivial
        statement, and its schema is not older than this code's (asked until it is seen once).
        O(1) at any ledger size: it reads nothing of the ledger."""
        return None

    def sequencer_state(self) -> SequencerState | None:
        """Where the sequencer stands (None: this store sequences at write)."""
        return None

    def sequencer_leader(self) -> SequencerLeader | None:
        """A bid to lead the sequencing (None: this store sequences at write)."""
        return None

    def order_problems(self) -> OrderProblems | None:
        """What is wrong with the order rows (None: this store sequences at write, and has
        none)."""
        return None

    @abstractmethod
    def iter_events(self, batch: int = 5000) -> Iterator[RecordedEvent]:
        """Every event in position order, page by page (constant memory)."""

    @abstractmethod
    def upgrade_schema(self) -> tuple[str | None, str | None]:
        """Create or upgrade the schema; (revision before, revision after)."""

    @abstractmethod
    def take_submit_token(self, account: str, rate_per_s: float, burst: int) -> float:
        """Take one submit from the account's token bucket (`rate_per_s` refill, `burst`
        deep), shared by every process on this store: 0.0 when taken, else the seconds until
        one will be there (nothing taken). One statement, in a transaction of its own."""

    @abstractmethod
    def request_key(self) -> bytes:
        """This ledger's own secret key for request fingerprints (made once, at migrate)."""

    def job_listener(self, on_jobs: OnJobs, on_connect: OnConnect) -> Listener | None:
        """A listener for job changes, where the backend can push them (else None: poll)."""
        return None

    def loop_job_reads(self) -> LoopReads | None:
        """Job reads for the running event loop, with no thread hop, where the backend has
        them (else None: read on a thread). The caller closes them, on that loop."""
        return None

    def local_folder(self) -> Path | None:
        """The folder of a ledger kept in a local file (SQLite), where its secrets key is kept
        beside it unless one is configured (`ledger.keyring`); None for any other."""
        return None

    # --- database roles (PostgreSQL only) -------------------------------------------------

    def connected_role(self) -> ConnectedRole | None:
        """The role this store's connections act as (None: the backend has no roles)."""
        return None

    def grant_app_role(self, role: str, password: str | None = None) -> None:
        """Create the application role if missing and grant it what the API, workers and
        reconciler need, and no more (run as the owner of the ledger's tables)."""
        raise no_roles(self.dialect)

    def grant_script(self, role: str) -> str:
        """What `grant_app_role` runs, as a SQL script (without the password)."""
        raise no_roles(self.dialect)

    @abstractmethod
    def describe(self) -> str:
        """Where this ledger lives, fit to print (no password)."""

    @abstractmethod
    def close(self) -> None: ...

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    # --- conveniences over the above ------------------------------------------------------

    def append(
        self,
        stream_id: str,
        new_events: Sequence[NewEvent],
        expected_version: int | None = None,
    ) -> Appended:
        with self.transaction() as tx:
            return tx.append(stream_id, new_events, expected_version)

    def append_jobs(self, items: Sequence[JobAppend]) -> list[JobAppended]:
        """A batch of job appends in one transaction (one commit for all of them)."""
        with self.transaction() as tx:
            return tx.append_jobs(items)

    def read_stream(self, stream_id: str) -> list[RecordedEvent]:
        with self.reading() as reads:
            return reads.read_stream(stream_id)

    def last_position(self) -> int:
        """The ledger's head after the events committed before the call are sequenced (a
        tick first: for an export's or a rebuild's extent, not for probes or gauges)."""
        self.sequence()
        with self.quick_read() as reads:
            return reads.last_position()

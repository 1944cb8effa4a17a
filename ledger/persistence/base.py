"""The store's contract: every database operation the use cases need, in one place.

A `Store` opens read-only views (`reading`) and write transactions (`transaction`); what they
offer is declared once and implemented by each backend: SQL (`ledger.persistence.sql_store`,
Postgres and SQLite) and memory (`ledger.persistence.memory`, for fast tests and as a
reference). One contract test suite runs against all of them. Nothing here decides: the
services in `ledger.services` do, and call only these methods.

The declarations, in two contracts. The job contract, what a job's way through the ledger
needs (submit, claim, record, reconcile, an agent's read): `Store` here, a view's `JobReads`
in `read_contract` and a transaction's `JobWrites` in `write_contract`. The operations
contract, what people and operations need beside it (reports, audit, rebuild, the Merkle
tree, webhooks): `OpsReads` and `OpsWrites` in `ops_contract`, each part in its own
`*_contract` module. A backend's view is a `Reads` (both) and its transaction a `Writes`
(both); what it may hand out beside them is in `store_hooks`. All are importable from here;
each contract has its own test suite (`tests/persistence/test_job_contract_*.py`,
`test_ops_contract_*.py`).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from types import TracebackType
from typing import Self

from ledger.events import NewEvent, RecordedEvent
from ledger.job_view import JobView
from ledger.persistence import job_lane
from ledger.persistence.appends import (
    Appended,
    JobAppend,
    JobAppended,
)
from ledger.persistence.archive_contract import ArchiveStore
from ledger.persistence.ops_contract import OpsReads, OpsWrites
from ledger.persistence.read_contract import JobReads, Reads
from ledger.persistence.report_contract import ReportReads
from ledger.persistence.store_hooks import Listener, LoopReads, OnConnect, OnJobs, SequencerLeader
from ledger.persistence.write_contract import JobWrites, Writes
from ledger.privileges import ConnectedRole, no_roles
from ledger.queries import (
    OrderProblems,
    SequencerState,
)

__all__ = [
    "BRAKES_LOCK",
    "JobReads",
    "JobWrites",
    "Listener",
    "LoopReads",
    "OnConnect",
    "OnJobs",
    "OpsReads",
    "OpsWrites",
    "Reads",
    "ReportReads",
    "SequencerLeader",
    "Store",
    "Writes",
]

BRAKES_LOCK = job_lane.BRAKES_LOCK  # shared by claims and submits, exclusive for a pull


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

    def changes_bells(self) -> Path | None:
        """The folder of bells (`ledger.doorbell`) this store's writers ring after each commit,
        where the backend has no push of its own and processes share it (SQLite); else None."""
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

"""Small builders for events used across the test suites."""

from __future__ import annotations

import threading
import uuid
from datetime import UTC, datetime, timedelta

from ledger.chain import VerifyReport
from ledger.codes import Code
from ledger.digest import Digest
from ledger.error_info import ErrorInfo
from ledger.errors import DispatchError
from ledger.events import (
    JobAccepted,
    NewEvent,
    Payload,
    WorkFailed,
    WorkStarted,
    WorkSucceeded,
    job_stream,
)
from ledger.job_view import JobView
from ledger.persistence.base import Store
from ledger.persistence.engine import make_engine
from ledger.persistence.sql_store import SqlStore
from ledger.rebuild_state import RebuildReport
from ledger.runtime.ledger import Ledger
from ledger.services import admin, audit

# The `error` object's ten keys (contract §3), as the contract states them.
ERROR_KEYS = frozenset(
    {
        "code",
        "dependency",
        "operation",
        "retryable",
        "required_capability",
        "safe_fallback",
        "fix",
        "message",
        "retry_after_s",
        "cause",
    }
)


def new(payload: Payload, actor: str = "test") -> NewEvent:
    return NewEvent(payload=payload, actor=actor)  # type: ignore[arg-type]


def accepted(
    account: str = "acme",
    tool: str = "tracker.read_issue",
    start_within_s: float | None = None,  # None: a decision from before start deadlines
    **args: object,
) -> NewEvent:
    payload = JobAccepted(
        account=account, tool=tool, args={"issue_ref": "T-1", **args}, start_within_s=start_within_s
    )
    return new(payload)


def started(attempt: int = 1, lease_s: float = 30) -> NewEvent:
    lease = datetime.now(UTC) + timedelta(seconds=lease_s)
    return new(WorkStarted(attempt=attempt, worker="w-1", lease_expires_at=lease), "worker:w-1")


def succeeded(attempt: int = 1, **result: object) -> NewEvent:
    return new(WorkSucceeded(attempt=attempt, result=dict(result)), "worker:w-1")


def failed(code: Code = Code.ACCESS_DENIED, attempt: int = 1) -> NewEvent:
    error = ErrorInfo(code=code, dependency="tracker", message="I could not read the item.")
    return new(WorkFailed(attempt=attempt, error=error), "worker:w-1")


def fresh_job_stream() -> str:
    return job_stream(uuid.uuid4())


class Recorder:
    """A dispatcher that only remembers what it was handed (thread-safe)."""

    def __init__(self) -> None:
        self.sent: list[str] = []
        self.delays: list[float] = []
        self._lock = threading.Lock()

    def dispatch(self, job_id: str, delay_s: float = 0.0) -> None:
        with self._lock:
            self.sent.append(job_id)
            self.delays.append(delay_s)


class MarkedRecorder(Recorder):
    """A recorder whose queue keeps an epoch marker (`ledger.dispatch.QueueMarker`), which
    `wipe()` loses as a deleted queue would; `away` makes it a broker that cannot be asked."""

    def __init__(self, queue: str = "outcomes") -> None:
        super().__init__()
        self.queue = queue
        self.marker: str | None = None
        self.away = False

    def dispatch(self, job_id: str, delay_s: float = 0.0) -> None:
        if self.away:
            raise DispatchError("broker away")
        super().dispatch(job_id, delay_s)

    def marker_present(self, epoch: str) -> bool | None:
        return None if self.away else self.marker == epoch

    def place_marker(self, epoch: str) -> None:
        if self.away:
            raise DispatchError("broker away")
        self.marker = epoch

    def wipe(self) -> None:
        self.marker = None


def get_job(where: Store | Ledger, job_id: str) -> JobView | None:
    """The job's read-model view as stored (None when unknown), whoever may see it."""
    store = where.store if isinstance(where, Ledger) else where
    with store.reading() as reads:
        return reads.job(job_id)


def as_ledger(where: Store | Ledger) -> Ledger:
    return where if isinstance(where, Ledger) else Ledger(where)


def verify_store(where: Store | Ledger, digest: Digest | None = None) -> VerifyReport:
    """`audit verify` on this store (with an earlier digest, if given)."""
    return audit.verify(as_ledger(where), digest)


def rebuild(where: Store | Ledger) -> RebuildReport:
    """`outcomes rebuild` on this store (online, resumable: `ledger.services.rebuild`)."""
    return admin.rebuild(as_ledger(where))


def digest_of(where: Store | Ledger) -> Digest:
    return audit.take_digest(as_ledger(where))


def open_sql(url: str, pool_size: int = 5) -> SqlStore:
    """A SQL store on `url` (close it, or use it as a context manager)."""
    return SqlStore(make_engine(url, pool_size=pool_size))

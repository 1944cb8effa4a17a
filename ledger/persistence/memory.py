"""An in-memory store: the same contract as the SQL store, for one process.

It exists so that the use cases can be tested in milliseconds without a database, and as a
plain reading of what the contract means. It keeps the SQL store's invariants (one terminal
outcome per job, an event id recorded once, one job per idempotency key and account) and
folds read models with the same pure functions. Transactions run one at a time under one
lock; a failed one is undone, so nothing of it stays.
"""

from __future__ import annotations

import secrets
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime
from typing import Any

from pydantic import BaseModel

from ledger.chain import event_rows, link_rows
from ledger.clock import now
from ledger.errors import (
    AlreadyTerminalError,
    ConcurrencyError,
    DuplicateEventError,
    IdempotencyKeyTakenError,
)
from ledger.events import TERMINAL_EVENT_TYPES, NewEvent, RecordedEvent
from ledger.job_view import JobView
from ledger.persistence import memory_fairness
from ledger.persistence.appends import Appended
from ledger.persistence.base import Reads, Store, Writes
from ledger.persistence.memory_audit import MemoryAuditWrites
from ledger.persistence.memory_outbox import MemoryOutboxWrites
from ledger.persistence.memory_reads import MemoryReads
from ledger.persistence.memory_rebuild import MemoryRebuildWrites
from ledger.persistence.memory_state import Lease, MemoryState
from ledger.persistence.memory_webhooks import MemoryWebhookWrites
from ledger.read_models import model_for
from ledger.token_view import TokenView

MEMORY_URL = "memory://"


class MemoryWrites(
    MemoryReads,
    MemoryOutboxWrites,
    MemoryWebhookWrites,
    MemoryAuditWrites,
    MemoryRebuildWrites,
    Writes,
):
    def __init__(self, state: MemoryState) -> None:
        super().__init__(state)
        self.undo: list[Callable[[], None]] = []

    def append(
        self,
        stream_id: str,
        new_events: Sequence[NewEvent],
        expected_version: int | None = None,
    ) -> Appended:
        if not new_events:
            return Appended([], None)
        state = self.state
        stream = state.streams.get(stream_id, [])
        version = len(stream)
        if expected_version is not None and expected_version != version:
            raise ConcurrencyError(stream_id, expected_version, version)
        rows = event_rows(
            stream_id, new_events, version, stream[-1].hash if stream else None, now()
        )
        link_rows(state.events[-1].ledger_hash if state.events else None, rows)
        recorded = [
            RecordedEvent(position=state.next_position + i, **row) for i, row in enumerate(rows)
        ]
        self._check(stream_id, recorded)
        view = self._fold(stream_id, recorded)  # raises before anything changed
        state.next_position += len(recorded)  # positions are not reused, as in a sequence
        state.events.extend(recorded)
        state.streams.setdefault(stream_id, []).extend(recorded)
        state.event_ids.update(e.event_id for e in recorded)
        self.undo.append(state.tree.grow(recorded))
        ended = any(e.type in TERMINAL_EVENT_TYPES for e in recorded)
        if ended:
            state.terminal.add(stream_id)
        for event in recorded:
            if (uncount := state.count_finding(event)) is not None:
                self.undo.append(uncount)

        def undo_append() -> None:
            del state.events[-len(recorded) :]
            del state.streams[stream_id][-len(recorded) :]
            if not state.streams[stream_id]:
                del state.streams[stream_id]
            state.event_ids.difference_update(e.event_id for e in recorded)
            if ended:
                state.terminal.discard(stream_id)

        self.undo.append(undo_append)
        return Appended(recorded, view)

    def _check(self, stream_id: str, recorded: list[RecordedEvent]) -> None:
        ids = [e.event_id for e in recorded]
        if len(set(ids)) < len(ids) or self.state.event_ids.intersection(ids):
            taken = next(i for i in ids if i in self.state.event_ids or ids.count(i) > 1)
            raise DuplicateEventError(str(taken))
        terminal = sum(e.type in TERMINAL_EVENT_TYPES for e in recorded)
        if terminal and (terminal > 1 or stream_id in self.state.terminal):
            raise AlreadyTerminalError(stream_id)

    def _fold(self, stream_id: str, recorded: list[RecordedEvent]) -> BaseModel | None:
        model = model_for(recorded[0].type)
        if model is None:
            return None
        key = model.key(recorded[0])
        table = self.state.views(model.table)
        view = table.get(key)
        for event in recorded:
            view = model.fold(view, event)
        assert isinstance(view, BaseModel)
        if isinstance(view, JobView):
            self._put_job(view)
        else:
            self._put(table, key, view)
        if isinstance(view, TokenView):
            self._put(self.state.token_hashes, view.token_hash, key)
        return view

    def _put_job(self, job: JobView) -> None:
        key = job.idempotency_key
        if key is not None:
            holder = self.state.idempotency.get((job.account, key))
            if holder not in (None, job.job_id):
                raise IdempotencyKeyTakenError(f"{job.account}/{key} is held by job {holder}")
            self._put(self.state.idempotency, (job.account, key), job.job_id)
        self.undo.append(self.state.count_job(self.state.jobs.get(job.job_id), job))
        self._put(self.state.jobs, job.job_id, job)

    def _put(self, table: dict[Any, Any], key: Any, value: Any) -> None:
        missing = object()
        before = table.get(key, missing)
        table[key] = value

        def restore() -> None:
            if before is missing:
                table.pop(key, None)
            else:
                table[key] = before

        self.undo.append(restore)

    @contextmanager
    def isolated(self) -> Iterator[None]:
        mark = len(self.undo)
        try:
            yield
        except BaseException:
            while len(self.undo) > mark:
                self.undo.pop()()
            raise

    def lock(self, *key: str, shared: bool = False) -> None:
        return None  # transactions already run one at a time

    def start_lease(self, job_id: str, attempt: int, worker: str, expires_at: datetime) -> None:
        self._put(self.state.leases, job_id, Lease(attempt, worker, expires_at))

    def renew_leases(self, held: Sequence[tuple[str, int]], expires_at: datetime) -> list[bool]:
        return [self._renew(job_id, attempt, expires_at) for job_id, attempt in held]

    def _renew(self, job_id: str, attempt: int, expires_at: datetime) -> bool:
        lease = self.state.leases.get(job_id)
        if lease is None or lease.attempt != attempt:
            return False
        self._put(self.state.leases, job_id, Lease(attempt, lease.worker, expires_at))
        return True

    def drop_lease(self, job_id: str, attempt: int) -> None:
        lease = self.state.leases.get(job_id)
        if lease is not None and lease.attempt == attempt:
            self.undo.append(lambda: self.state.leases.__setitem__(job_id, lease))
            del self.state.leases[job_id]


class MemoryStore(Store):
    dialect = "memory"

    def __init__(self) -> None:
        self.state = MemoryState()
        self._lock = threading.RLock()
        self._request_key = secrets.token_bytes(32)
        self._buckets: dict[str, memory_fairness.Bucket] = {}

    def take_submit_token(self, account: str, rate_per_s: float, burst: int) -> float:
        with self._lock:
            return memory_fairness.take(self._buckets, account, rate_per_s, burst)

    def request_key(self) -> bytes:
        return self._request_key

    @contextmanager
    def transaction(self) -> Iterator[MemoryWrites]:
        with self._lock:
            tx = MemoryWrites(self.state)
            try:
                yield tx
            except BaseException:
                for step in reversed(tx.undo):
                    step()
                raise

    @contextmanager
    def reading(self) -> Iterator[Reads]:
        with self._lock:
            yield MemoryReads(self.state)

    def iter_events(self, batch: int = 5000) -> Iterator[RecordedEvent]:
        with self._lock:
            snapshot = list(self.state.events)
        return iter(snapshot)

    def upgrade_schema(self) -> tuple[str | None, str | None]:
        return None, None  # nothing to create

    def describe(self) -> str:
        return MEMORY_URL

    def close(self) -> None:
        return None

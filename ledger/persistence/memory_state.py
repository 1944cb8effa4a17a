"""What a memory ledger holds (`ledger.persistence.memory`): events, read models, leases and
the outbox's records, with indexes that mirror the SQL schema's unique ones."""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from ledger.brake_view import BrakeView
from ledger.event_log import FINDER, FINDINGS, finding_cause
from ledger.events import RecordedEvent
from ledger.job_view import JobView
from ledger.merkle import Frontier, event_leaf_hash
from ledger.merkle_store import MemorySubtreeHashes
from ledger.queueing import DispatchState
from ledger.rebuild_state import RebuildProgress
from ledger.token_view import TokenView
from ledger.verification_record import VerificationRecord
from ledger.webhook_view import WebhookView
from ledger.webhooks import Attempt, Delivery


@dataclass
class Lease:
    attempt: int
    worker: str
    expires_at: datetime


# A kept count's group: account, tool, accepted, status, code (as the SQL counts key them).
CountKey = tuple[str, str, bool, str, str | None]
Undo = Callable[[], None]


def count_key(view: JobView) -> CountKey:
    code = view.code.value if view.code else None
    return (view.account, view.tool, view.accepted, view.status.value, code)


@dataclass
class MemoryTree:
    hashes: MemorySubtreeHashes = field(default_factory=MemorySubtreeHashes)
    frontier: Frontier = field(default_factory=Frontier.empty)
    positions: list[int] = field(default_factory=list)  # leaf -> ledger position
    leaves: dict[int, int] = field(default_factory=dict)  # ledger position -> leaf

    def grow(self, recorded: Sequence[RecordedEvent]) -> Callable[[], None]:
        """These events are the tree's next leaves; what takes them back."""
        before = self.frontier
        lengths = {level: len(row) for level, row in self.hashes.levels.items()}
        self.frontier = self.hashes.append(before, (event_leaf_hash(e.hash) for e in recorded))
        for event in recorded:
            self.leaves[event.position] = len(self.positions)
            self.positions.append(event.position)

        def undo() -> None:
            self.frontier = before
            for level, row in self.hashes.levels.items():
                del row[lengths.get(level, 0) :]
            for event in recorded:
                self.leaves.pop(event.position, None)
            del self.positions[before.size :]

        return undo


@dataclass
class MemoryState:
    """Everything a memory ledger holds; the indexes mirror the SQL schema's unique ones."""

    events: list[RecordedEvent] = field(default_factory=list)  # position order
    streams: dict[str, list[RecordedEvent]] = field(default_factory=dict)
    event_ids: set[uuid.UUID] = field(default_factory=set)
    terminal: set[str] = field(default_factory=set)  # job streams with their one outcome
    jobs: dict[str, JobView] = field(default_factory=dict)
    idempotency: dict[tuple[str, str], str] = field(default_factory=dict)  # → job_id
    brakes: dict[str, BrakeView] = field(default_factory=dict)
    tokens: dict[str, TokenView] = field(default_factory=dict)
    token_hashes: dict[str, str] = field(default_factory=dict)  # → token_id
    leases: dict[str, Lease] = field(default_factory=dict)
    dispatches: dict[str, DispatchState] = field(default_factory=dict)  # the outbox's records
    epochs: dict[str, str] = field(default_factory=dict)  # queue -> its current epoch
    webhooks: dict[str, WebhookView] = field(default_factory=dict)
    webhook_cursor: int | None = None
    # (webhook id, event id) → the delivery, and who holds its claim until when
    deliveries: dict[tuple[str, str], Delivery] = field(default_factory=dict)
    claims: dict[tuple[str, str], tuple[str, datetime]] = field(default_factory=dict)
    attempts: list[Attempt] = field(default_factory=list)
    next_position: int = 1
    # The kept counts (the SQL stores' job_counts and finding_counts): jobs by group, and the
    # reconciler's findings by (type, cause) with the newest one's time.
    job_counts: Counter[CountKey] = field(default_factory=Counter)
    findings: dict[tuple[str, str], tuple[int, datetime]] = field(default_factory=dict)
    verifications: list[VerificationRecord] = field(default_factory=list)
    rebuild: RebuildProgress | None = None  # where an online rebuild stands
    tree: MemoryTree = field(default_factory=MemoryTree)  # the Merkle tree over ledger order

    def count_job(self, before: JobView | None, after: JobView) -> Undo:
        """A job's view replaced: its group's count moves; what undoes it."""
        moved = [(count_key(before), -1)] if before is not None else []
        moved.append((count_key(after), 1))
        for key, n in moved:
            self.job_counts[key] += n

        def undo() -> None:
            for key, n in moved:
                self.job_counts[key] -= n

        return undo

    def uncount_job(self, gone: JobView) -> Undo:
        """A job's view removed: its group's count drops; what undoes it."""
        key = count_key(gone)
        self.job_counts[key] -= 1

        def undo() -> None:
            self.job_counts[key] += 1

        return undo

    def count_finding(self, event: RecordedEvent) -> Undo | None:
        """An event recorded: counted if it is a reconciler's finding; what undoes it."""
        if event.actor != FINDER or event.type not in FINDINGS:
            return None
        key = (event.type, finding_cause(event.payload))
        before = self.findings.get(key)
        n, last = before if before is not None else (0, event.recorded_at)
        self.findings[key] = (n + 1, max(last, event.recorded_at))

        def undo() -> None:
            if before is None:
                del self.findings[key]
            else:
                self.findings[key] = before

        return undo

    def views(self, table: str) -> dict[str, Any]:
        """A read model's views by key, as `ledger.read_models` names the model."""
        found: dict[str, dict[str, Any]] = {
            "jobs": self.jobs,
            "brakes": self.brakes,
            "tokens": self.tokens,
            "webhooks": self.webhooks,
        }
        if table not in found:
            raise ValueError(f"{table!r} is not a read model")
        return found[table]

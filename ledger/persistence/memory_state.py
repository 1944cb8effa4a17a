"""What a memory ledger holds (`ledger.persistence.memory`): events, read models, leases and
the outbox's records, with indexes that mirror the SQL schema's unique ones."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from ledger.brake_view import BrakeView
from ledger.events import RecordedEvent
from ledger.job_view import JobView
from ledger.queueing import DispatchState
from ledger.token_view import TokenView
from ledger.webhook_view import WebhookView
from ledger.webhooks import Attempt, Delivery


@dataclass
class Lease:
    attempt: int
    worker: str
    expires_at: datetime


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

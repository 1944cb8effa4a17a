"""The webhooks' part of the contract in memory (`ledger.persistence.memory`)."""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Collection, Sequence
from datetime import datetime
from typing import Any

from ledger.events import TERMINAL_EVENT_TYPES, job_id_of
from ledger.persistence.memory_state import MemoryState
from ledger.webhook_view import WebhookView
from ledger.webhooks import Attempt, Delivery, NewDelivery, Settled, TerminalEvent


class MemoryWebhookReads:
    state: MemoryState

    def webhook(self, webhook_id: str) -> WebhookView | None:
        return self.state.webhooks.get(webhook_id)

    def webhooks(self, account: str | None) -> list[WebhookView]:
        found = [v for v in self.state.webhooks.values() if account in (None, v.account)]
        return sorted(found, key=lambda v: v.since_position)

    def webhook_cursor(self) -> int | None:
        return self.state.webhook_cursor

    def terminal_events_after(self, after: int, upto: int, limit: int) -> list[TerminalEvent]:
        found = [
            TerminalEvent(
                e.position,
                str(e.event_id),
                job_id_of(e.stream_id),
                approval=e.type == "job.accepted",
            )
            for e in self.state.events
            if after < e.position <= upto
            and (
                e.type in TERMINAL_EVENT_TYPES
                or (e.type == "job.accepted" and e.data.get("approval") is not None)
            )
        ]
        return found[:limit]

    def registered_at(self, hooks: Sequence[WebhookView]) -> dict[str, int]:
        return {h.webhook_id: h.since_position for h in hooks}  # sequenced at write

    def deliveries(self, webhook_id: str, limit: int) -> list[Delivery]:
        found = [d for d in self.state.deliveries.values() if d.webhook_id == webhook_id]
        return sorted(found, key=lambda d: d.position, reverse=True)[:limit]

    def delivery_attempts(self, webhook_id: str, event_ids: Sequence[str]) -> list[Attempt]:
        wanted = set(event_ids)
        return [
            a for a in self.state.attempts if a.webhook_id == webhook_id and a.event_id in wanted
        ]


class MemoryWebhookWrites(MemoryWebhookReads):
    _put: Callable[[dict[Any, Any], Any, Any], None]
    undo: list[Callable[[], None]]

    def set_webhook_cursor(self, position: int) -> None:
        before = self.state.webhook_cursor
        if before is not None and before >= position:
            return
        self.state.webhook_cursor = position
        self.undo.append(lambda: setattr(self.state, "webhook_cursor", before))

    def add_deliveries(self, new: Sequence[NewDelivery]) -> int:
        added = 0
        for d in new:
            key = (d.webhook_id, d.event_id)
            if key in self.state.deliveries:
                continue
            delivery = Delivery(
                webhook_id=d.webhook_id,
                event_id=d.event_id,
                job_id=d.job_id,
                position=d.position,
                body=d.body,
                state="pending",
                attempts=0,
                created_at=d.created_at,
                next_attempt_at=d.created_at,
            )
            self._put(self.state.deliveries, key, delivery)
            added += 1
        return added

    def claim_deliveries(
        self,
        at: datetime,
        until: datetime,
        claimer: str,
        limit: int,
        exclude: Collection[str] = (),
    ) -> list[Delivery]:
        hooks = self.state.webhooks
        due = sorted(
            (
                d
                for key, d in self.state.deliveries.items()
                if d.state == "pending"
                and d.webhook_id not in exclude
                and d.next_attempt_at <= at
                and (key not in self.state.claims or self.state.claims[key][1] < at)
                and d.webhook_id in hooks
                and hooks[d.webhook_id].active
            ),
            key=lambda d: d.position,
        )[:limit]
        for d in due:
            self._put(self.state.claims, (d.webhook_id, d.event_id), (claimer, until))
        return due

    def release_claims(self, keys: Sequence[tuple[str, str]], claimer: str) -> None:
        claims = self.state.claims
        for key in keys:
            held = claims.get(key)
            if held is not None and held[0] == claimer:
                del claims[key]
                self.undo.append(functools.partial(claims.__setitem__, key, held))

    def finish_attempt(self, attempt: Attempt, settled: Settled) -> bool:
        self.state.attempts.append(attempt)
        self.undo.append(lambda: self.state.attempts.remove(attempt))
        key = (attempt.webhook_id, attempt.event_id)
        held = self.state.claims.get(key)
        delivery = self.state.deliveries.get(key)
        if held is None or held[0] != attempt.relay or delivery is None:
            return False
        if delivery.state != "pending":
            return False
        changed = dataclasses.replace(
            delivery,
            attempts=attempt.attempt,
            first_attempt_at=delivery.first_attempt_at or attempt.at,
            last_status=attempt.status,
            last_error=attempt.error[:500] if attempt.error else None,
            state=settled.state,
            next_attempt_at=settled.next_attempt_at or delivery.next_attempt_at,
            delivered_at=attempt.at if settled.state == "delivered" else delivery.delivered_at,
        )
        self._put(self.state.deliveries, key, changed)
        before = self.state.claims.pop(key)
        self.undo.append(lambda: self.state.claims.__setitem__(key, before))
        return True

    def prune_deliveries(self, before: datetime, limit: int) -> int:
        old = [
            key
            for key, d in self.state.deliveries.items()
            if d.state != "pending" and d.created_at < before
        ][:limit]
        removed = {key: self.state.deliveries.pop(key) for key in old}
        self.undo.append(lambda: self.state.deliveries.update(removed))
        gone = set(old)
        kept = [a for a in self.state.attempts if (a.webhook_id, a.event_id) not in gone]
        if len(kept) != len(self.state.attempts):
            previous = self.state.attempts
            self.state.attempts = kept
            self.undo.append(lambda: setattr(self.state, "attempts", previous))
        return len(old)

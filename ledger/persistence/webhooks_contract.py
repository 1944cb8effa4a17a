"""The store's contract, the webhooks' part (`ledger.services.webhooks`, `.webhook_relay`):
the webhooks read model, the relay's cursor over the terminal events, deliveries (one per
webhook and outcome event: the claim) and their attempts. `Reads` and `Writes`
(`ledger.persistence.base`) take these in; each store implements them (`sql_webhooks.py`,
`memory_webhooks.py`)."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Collection, Sequence
from datetime import datetime

from ledger.webhook_view import WebhookView
from ledger.webhooks import Attempt, Delivery, NewDelivery, Settled, TerminalEvent

CURSOR = "terminal"  # the relay's one cursor (the name leaves room for others)


class WebhookReads(ABC):
    @abstractmethod
    def webhook(self, webhook_id: str) -> WebhookView | None: ...

    @abstractmethod
    def webhooks(self, account: str | None) -> list[WebhookView]:
        """The webhooks of one account (None: every account), removed ones too, oldest
        first."""

    @abstractmethod
    def webhook_cursor(self) -> int | None:
        """The position up to which the relay has read terminal events (None: never ran)."""

    @abstractmethod
    def terminal_events_after(self, after: int, upto: int, limit: int) -> list[TerminalEvent]:
        """Job terminal events at positions after `after`, up to `upto`, in position order,
        at most `limit`."""

    @abstractmethod
    def registered_at(self, hooks: Sequence[WebhookView]) -> dict[str, int]:
        """Each webhook's registration's ledger position, by webhook id; a registration not
        yet sequenced is missing (`since_position` is where its row was written)."""

    @abstractmethod
    def deliveries(self, webhook_id: str, limit: int) -> list[Delivery]:
        """The webhook's deliveries, the latest outcome first, at most `limit`."""

    @abstractmethod
    def delivery_attempts(self, webhook_id: str, event_ids: Sequence[str]) -> list[Attempt]:
        """Every attempt of these deliveries, in the order they were made."""


class WebhookWrites(ABC):
    @abstractmethod
    def set_webhook_cursor(self, position: int) -> None:
        """Move the cursor forward to `position` (never back)."""

    @abstractmethod
    def add_deliveries(self, new: Sequence[NewDelivery]) -> int:
        """Record these deliveries, pending and due now; one already recorded (the same
        webhook and event) is left as it is. How many were new."""

    @abstractmethod
    def claim_deliveries(
        self,
        at: datetime,
        until: datetime,
        claimer: str,
        limit: int,
        exclude: Collection[str] = (),
    ) -> list[Delivery]:
        """Claim, until `until`, at most `limit` pending deliveries of active webhooks that
        are due at `at` and that no other claim holds (an expired one does not hold), the
        oldest outcome first; none of the webhooks in `exclude` (the claimer's busy ones)."""

    @abstractmethod
    def release_claims(self, keys: Sequence[tuple[str, str]], claimer: str) -> None:
        """Let go of these deliveries' claims (webhook id, event id) where `claimer` still
        holds them, unattempted: another pass or relay may claim them at once."""

    @abstractmethod
    def finish_attempt(self, attempt: Attempt, settled: Settled) -> bool:
        """Record the attempt, and, if `attempt.relay` still holds the delivery's claim,
        settle the delivery as `settled` and release the claim; False when it no longer
        held it (its claim expired and another relay took it: the attempt is still kept)."""

    @abstractmethod
    def prune_deliveries(self, before: datetime, limit: int) -> int:
        """Forget at most `limit` settled deliveries (delivered or failed) created before
        `before`, with their attempts (OUTCOMES_WEBHOOK_KEEP_DAYS); how many. Pending ones
        stay, whatever their age: they are still being tried."""

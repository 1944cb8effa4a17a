"""Read model of the webhook streams (docs/webhooks.md): where an account's terminal outcomes
are delivered, and whether deliveries still go there."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict

from ledger.events import RecordedEvent, WebhookDisabled, WebhookRegistered, WebhookRemoved

WebhookStatus = Literal["active", "disabled", "removed"]


def webhook_stream(webhook_id: str) -> str:
    return f"webhook-{webhook_id}"


class WebhookView(BaseModel):
    model_config = ConfigDict(frozen=True)

    webhook_id: str
    account: str
    url: str
    secret: str  # sealed (ledger.webhooks.seal_secret); never shown
    status: WebhookStatus = "active"
    created_at: datetime
    # Where the registration was written (its ledger position is found at delivery): outcomes
    # recorded after it in ledger order are delivered here.
    since_position: int
    changed_at: datetime
    reason: str | None = None  # why it was disabled
    ledger_position: int
    stream_version: int = 1

    @property
    def active(self) -> bool:
        return self.status == "active"


def evolve_webhook(view: WebhookView | None, event: RecordedEvent) -> WebhookView:
    payload = event.payload
    if isinstance(payload, WebhookRegistered) and view is None:
        return WebhookView(
            webhook_id=payload.webhook_id,
            account=payload.account,
            url=payload.url,
            secret=payload.secret,
            created_at=event.recorded_at,
            since_position=event.stored_position,
            changed_at=event.recorded_at,
            ledger_position=event.stored_position,
            stream_version=event.stream_version,
        )
    stamp = {
        "changed_at": event.recorded_at,
        "ledger_position": event.stored_position,
        "stream_version": event.stream_version,
    }
    if isinstance(payload, WebhookRemoved) and view is not None:
        return view.model_copy(update=stamp | {"status": "removed"})
    if isinstance(payload, WebhookDisabled) and view is not None:
        status = "removed" if view.status == "removed" else "disabled"
        return view.model_copy(update=stamp | {"status": status, "reason": payload.reason})
    raise ValueError(f"{event.stream_id}: unexpected {event.type}")

"""Webhooks, as callers manage them (docs/webhooks.md): register a URL for an account's
terminal outcomes (its signing secret shown once), list them, remove one, and read what was
delivered and every attempt. Registration, removal and disabling are events of the webhook's
own stream, like tokens'; the deliveries are operational state (`webhook_relay`)."""

from __future__ import annotations

from dataclasses import dataclass

from ledger.errors import (
    ConcurrencyError,
    WebhookLimitError,
    WebhookNotFoundError,
    WebhookUnavailableError,
)
from ledger.events import NewEvent, WebhookDisabled, WebhookRegistered, WebhookRemoved
from ledger.persistence.appends import NO_STREAM
from ledger.runtime.ledger import Ledger
from ledger.settings import DEFAULT_MAX_WEBHOOKS_PER_ACCOUNT
from ledger.uuid7 import new_id
from ledger.webhook_targets import check_target
from ledger.webhook_view import WebhookView, webhook_stream
from ledger.webhooks import Attempt, Delivery, new_secret, seal_secret

MAX_DELIVERIES = 500


@dataclass(frozen=True)
class RegisteredWebhook:
    view: WebhookView
    secret: str  # returned once, kept only sealed


def register(
    ledger: Ledger,
    account: str,
    url: str,
    actor: str,
    allow_hosts: frozenset[str],
    max_per_account: int = DEFAULT_MAX_WEBHOOKS_PER_ACCOUNT,
) -> RegisteredWebhook:
    """`account`'s terminal outcomes recorded from now on go to `url` (WebhookTargetError: a
    URL the SSRF rule refuses; WebhookUnavailableError: no secrets key to seal with;
    WebhookLimitError: the account already has `max_per_account` webhooks not removed).

    The count is read before the write: registrations racing each other may pass it together,
    by as many as there are at once, never without end."""
    if len(listed(ledger, account)) >= max_per_account:
        raise WebhookLimitError(account, max_per_account)
    keyring = ledger.secrets
    if keyring is None:
        raise WebhookUnavailableError(
            "webhooks need the secrets key (OUTCOMES_SECRETS_KEY): their signing secrets are "
            "kept sealed under it"
        )
    check_target(url, allow_hosts)
    webhook_id = new_id()
    secret = new_secret()
    payload = WebhookRegistered(
        webhook_id=webhook_id,
        account=account,
        url=url,
        secret=seal_secret(secret, webhook_id, keyring),
    )
    with ledger.store.transaction() as tx:
        event = NewEvent(payload=payload, actor=actor)
        view = tx.append(webhook_stream(webhook_id), [event], NO_STREAM).webhook
    return RegisteredWebhook(view, secret)


def visible(ledger: Ledger, webhook_id: str, account: str | None) -> WebhookView:
    """The webhook, if a caller scoped to `account` (None: every account) may see it."""
    with ledger.store.quick_read() as reads:
        view = reads.webhook(webhook_id)
    if view is None or account not in (None, view.account):
        raise WebhookNotFoundError(webhook_id)
    return view


def listed(ledger: Ledger, account: str | None) -> list[WebhookView]:
    """The webhooks not removed, of one account or all (None)."""
    with ledger.store.reading() as reads:
        return [v for v in reads.webhooks(account) if v.status != "removed"]


def remove(ledger: Ledger, webhook_id: str, account: str | None, actor: str) -> WebhookView:
    """No more deliveries to it (those pending are not attempted); removing twice is once."""
    return _change(ledger, webhook_id, account, WebhookRemoved(webhook_id=webhook_id), actor)


def disable(ledger: Ledger, webhook_id: str, reason: str, actor: str) -> WebhookView | None:
    """The relay's: deliveries failed past the bound. None when it is no longer active."""
    try:
        view = visible(ledger, webhook_id, None)
    except WebhookNotFoundError:
        return None
    if not view.active:
        return None
    payload = WebhookDisabled(webhook_id=webhook_id, reason=reason[:500])
    return _change(ledger, webhook_id, None, payload, actor)


def _change(
    ledger: Ledger,
    webhook_id: str,
    account: str | None,
    payload: WebhookRemoved | WebhookDisabled,
    actor: str,
) -> WebhookView:
    for _ in range(3):  # a disable and a removal may cross: the second reads again
        view = visible(ledger, webhook_id, account)
        if view.status == "removed":
            return view
        try:
            with ledger.store.transaction() as tx:
                event = NewEvent(payload=payload, actor=actor)
                return tx.append(webhook_stream(webhook_id), [event], view.stream_version).webhook
        except ConcurrencyError:
            continue
    return visible(ledger, webhook_id, account)


@dataclass(frozen=True)
class DeliveryLog:
    delivery: Delivery
    attempts: list[Attempt]


def deliveries(
    ledger: Ledger, webhook_id: str, account: str | None, limit: int = 100
) -> list[DeliveryLog]:
    """The webhook's deliveries, the latest outcome first, each with every attempt made."""
    visible(ledger, webhook_id, account)
    with ledger.store.reading() as reads:
        found = reads.deliveries(webhook_id, min(limit, MAX_DELIVERIES))
        attempts = reads.delivery_attempts(webhook_id, [d.event_id for d in found])
    by_event: dict[str, list[Attempt]] = {}
    for attempt in attempts:
        by_event.setdefault(attempt.event_id, []).append(attempt)
    return [DeliveryLog(d, by_event.get(d.event_id, [])) for d in found]

"""Webhooks (docs/webhooks.md): an account's terminal outcomes delivered to a URL it
registered, signed per Standard Webhooks with its reference library.

The signing secret (`whsec_` and base64 of 24 random bytes) is shown once, at registration;
the ledger keeps it sealed under the secrets key that seals declared secret arguments
(`ledger.keyring`: AES-256-GCM, the webhook's id as associated data), because signing needs
the secret itself (a hash would not do). No key, no webhook: registration is refused.

What one delivery is (a row per webhook and outcome event, the claim two relays take turns
on), what an attempt records, the retry policy, and the port the adapters send through.
"""

from __future__ import annotations

import base64
import secrets
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from math import floor
from typing import Literal, Protocol

from standardwebhooks.webhooks import Webhook

from ledger.errors import SecretUnavailableError
from ledger.keyring import Keyring, Sealed

SECRET_PREFIX = "whsec_"
SECRET_BYTES = 24
SEALED = "ol-webhook-secret:v1:"
USER_AGENT = "outcome-ledger-webhooks/1"

DeliveryState = Literal["pending", "delivered", "failed"]


def new_secret() -> str:
    """A fresh signing secret, in the form the reference library reads."""
    return SECRET_PREFIX + base64.b64encode(secrets.token_bytes(SECRET_BYTES)).decode()


def _aad(webhook_id: str) -> bytes:
    return f"{SEALED}{webhook_id}".encode()


def seal_secret(secret: str, webhook_id: str, keyring: Keyring) -> str:
    """The secret as the ledger keeps it: `ol-webhook-secret:v1:<key id>:<box>`, bound to
    the webhook (a box copied to another webhook does not open)."""
    sealed = keyring.seal(secret.encode(), _aad(webhook_id))
    return f"{SEALED}{sealed.kid}:{sealed.box}"


def open_secret(stored: str, webhook_id: str, keyring: Keyring | None) -> str:
    """The signing secret (raises SecretUnavailableError: no key, or not this webhook's)."""
    kid, sep, box = stored.removeprefix(SEALED).partition(":")
    if not stored.startswith(SEALED) or not sep:
        raise SecretUnavailableError("a webhook secret is not in the ledger's sealed form")
    if keyring is None:
        raise SecretUnavailableError(
            "this process has no secrets key (OUTCOMES_SECRETS_KEY)", missing_key=kid
        )
    return keyring.open(Sealed(kid, box), _aad(webhook_id)).decode()


def signed_headers(secret: str, message_id: str, body: str, at: datetime) -> dict[str, str]:
    """The Standard Webhooks headers for `body` sent at `at` (an aware UTC time)."""
    signature = Webhook(secret).sign(msg_id=message_id, timestamp=at, data=body)
    return {
        "webhook-id": message_id,
        "webhook-timestamp": str(floor(at.timestamp())),
        "webhook-signature": signature,
        "content-type": "application/json",
        "user-agent": USER_AGENT,
    }


@dataclass(frozen=True)
class DeliveryPolicy:
    """How long and how often a delivery is tried (OUTCOMES_WEBHOOK_* settings)."""

    retry_for_s: float = 86400.0  # after its first attempt; then failed, endpoint disabled
    backoff_s: float = 5.0  # before the second attempt; doubling after each failure
    backoff_max_s: float = 3600.0
    timeout_s: float = 10.0  # one attempt, connect to last byte
    allow_hosts: frozenset[str] = frozenset()  # hosts exempt from the SSRF rule

    def delay(self, attempts: int) -> float:
        """Seconds to wait after `attempts` failed attempts."""
        return min(self.backoff_s * 2.0 ** max(0, attempts - 1), self.backoff_max_s)


@dataclass(frozen=True)
class TerminalEvent:
    """A job's terminal event, as the relay tails them; or (`approval`) the decision of a call
    parked for a person's approval, delivered as `approval.requested` (docs/approvals.md)."""

    position: int
    event_id: str
    job_id: str
    approval: bool = False


@dataclass(frozen=True)
class NewDelivery:
    webhook_id: str
    event_id: str  # the outcome event's id: the `webhook-id` receivers deduplicate by
    job_id: str
    position: int
    body: str  # the terminal envelope, as GET /v1/jobs/{id} answers it; the same every try
    created_at: datetime


@dataclass(frozen=True)
class Delivery:
    """A delivery as the ledger keeps it (claimed by a relay while `claimed_until`)."""

    webhook_id: str
    event_id: str
    job_id: str
    position: int
    body: str
    state: DeliveryState
    attempts: int
    created_at: datetime
    next_attempt_at: datetime
    first_attempt_at: datetime | None = None
    delivered_at: datetime | None = None
    last_status: int | None = None
    last_error: str | None = None


@dataclass(frozen=True)
class Attempt:
    """One try of a delivery and what came of it: an HTTP status, or an error without one."""

    webhook_id: str
    event_id: str
    attempt: int
    at: datetime
    duration_ms: float
    status: int | None
    error: str | None
    relay: str  # which relay made it (host:pid)

    @property
    def delivered(self) -> bool:
        return self.status is not None and 200 <= self.status < 300


@dataclass(frozen=True)
class Settled:
    """What an attempt leaves of its delivery."""

    state: DeliveryState
    next_attempt_at: datetime | None  # pending: when to try again


class Sender(Protocol):
    """The port deliveries go out through (`cli/webhook_sender.py` over httpx)."""

    def post(
        self,
        url: str,
        body: bytes,
        headers: Mapping[str, str],
        timeout_s: float,
        address: str | None = None,
    ) -> int:
        """POST and answer the HTTP status; raise WebhookSendError when there is none.
        `address`: connect to this IP (the one the SSRF rule checked) instead of resolving
        the URL's host again; the request still names the host (Host, TLS server name)."""
        ...

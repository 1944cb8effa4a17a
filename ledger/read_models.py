"""The read models (jobs, brakes, tokens, webhooks), defined once: which events each one
folds, under which key, with which pure fold, and which copies of the view its table keeps
beside the view.

The SQL projections, the memory store, `outcomes rebuild` and `audit verify` all take these
definitions, so a live table, a rebuilt one and the one verify expects cannot disagree.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from pydantic import BaseModel

from ledger.brake_view import BrakeView, evolve_brake
from ledger.events import JOB_EVENT_TYPES, RecordedEvent, job_id_of
from ledger.job_fold import evolve
from ledger.job_view import JobView
from ledger.token_view import TokenView, evolve_token
from ledger.webhook_view import WebhookView, evolve_webhook

V = TypeVar("V", bound=BaseModel)


@dataclass(frozen=True)
class ReadModel(Generic[V]):
    table: str  # the table's name (and the model's, in reports)
    key_column: str  # its primary key
    view_type: type[V]
    types: frozenset[str]  # the event types it folds
    key: Callable[[RecordedEvent], str]
    fold: Callable[[V | None, RecordedEvent], V]
    columns: Callable[[V], dict[str, Any]]  # the copies kept for indexes and filters
    # Rebuilt from its stream's events on every change, never built on the stored row: short
    # streams whose rows people act on (an edited row does not survive the next change).
    refold: bool = False
    # A key's events are in one stream, its own: this prefix and the key (`job-<id>`, …).
    stream_prefix: str = ""

    def handles(self, event_type: str) -> bool:
        return event_type in self.types

    def home_stream(self, key: str) -> str:
        """The stream whose events make the row of `key` (no other stream's may)."""
        return f"{self.stream_prefix}{key}"

    def row(self, key: str, view: V) -> dict[str, Any]:
        """The stored row: the key, the whole view as JSON, and the copied columns."""
        return {self.key_column: key, "view": view.model_dump(mode="json"), **self.columns(view)}


def job_columns(view: JobView) -> dict[str, Any]:
    return {
        "account": view.account,
        "tool": view.tool,
        "status": view.status.value,
        "terminal": view.terminal,
        "accepted": view.accepted,
        "spends": view.spends,
        "attempts": view.attempts,
        "code": view.code.value if view.code else None,
        "idempotency_key": view.idempotency_key,
        "ledger_position": view.ledger_position,
        "created_at": view.created_at,
        "updated_at": view.updated_at,
        "lease_expires_at": view.lease_expires_at,
        "due_at": view.due_at,
    }


def _brake_columns(view: BrakeView) -> dict[str, Any]:
    return {"scope": view.scope, "active": view.active, "ledger_position": view.ledger_position}


def _token_columns(view: TokenView) -> dict[str, Any]:
    return {
        "account": view.account,
        "role": view.role,
        "token_hash": view.token_hash,
        "revoked": view.revoked,
        "ledger_position": view.ledger_position,
    }


def _data_key(field: str) -> Callable[[RecordedEvent], str]:
    def key(event: RecordedEvent) -> str:
        return str(event.data[field])

    return key


def _job_key(event: RecordedEvent) -> str:
    return job_id_of(event.stream_id)


JOBS: ReadModel[JobView] = ReadModel(
    "jobs", "job_id", JobView, JOB_EVENT_TYPES, _job_key, evolve, job_columns, stream_prefix="job-"
)
BRAKES: ReadModel[BrakeView] = ReadModel(
    "brakes",
    "brake_id",
    BrakeView,
    frozenset({"brake.pulled", "brake.released"}),
    _data_key("brake_id"),
    evolve_brake,
    _brake_columns,
    refold=True,
    stream_prefix="brake-",
)
TOKENS: ReadModel[TokenView] = ReadModel(
    "tokens",
    "token_id",
    TokenView,
    frozenset({"token.created", "token.revoked"}),
    _data_key("token_id"),
    evolve_token,
    _token_columns,
    refold=True,
    stream_prefix="token-",
)


def _webhook_columns(view: WebhookView) -> dict[str, Any]:
    return {
        "account": view.account,
        "status": view.status,
        "ledger_position": view.ledger_position,
    }


WEBHOOKS: ReadModel[WebhookView] = ReadModel(
    "webhooks",
    "webhook_id",
    WebhookView,
    frozenset({"webhook.registered", "webhook.removed", "webhook.disabled"}),
    _data_key("webhook_id"),
    evolve_webhook,
    _webhook_columns,
    refold=True,
    stream_prefix="webhook-",
)
READ_MODELS: tuple[ReadModel[Any], ...] = (JOBS, BRAKES, TOKENS, WEBHOOKS)


def model_for(event_type: str) -> ReadModel[Any] | None:
    """The read model that folds events of this type (None: no model does)."""
    return next((m for m in READ_MODELS if m.handles(event_type)), None)

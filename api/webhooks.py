"""Webhooks (docs/webhooks.md): an agent, or an operator for an account it covers, registers a
URL for the account's terminal outcomes (the signing secret is shown once), lists and removes
them; every caller of the account reads the deliveries and each attempt. Another account's
webhook is indistinguishable from one that does not exist."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Annotated, Literal

from fastapi import APIRouter, Depends, Path, Query
from pydantic import BaseModel, ConfigDict, Field
from starlette.requests import Request
from starlette.responses import Response

from api.auth import Principal, require
from api.models import ACCOUNT, Documented
from api.openapi import problems
from api.pages import json_response
from api.problems import forbidden, invalid_input
from api.state import state_of
from ledger.access import ALL_ACCOUNTS, DETAIL_ROLES, account_scope
from ledger.errors import WebhookNotFoundError
from ledger.services import webhooks
from ledger.token_view import TokenView
from ledger.webhook_view import WebhookView
from ledger.webhooks import Attempt

router = APIRouter(tags=["webhooks"])
MANAGE = require("agent", "operator")

WebhookId = Annotated[
    str,
    Path(description="The webhook's id, as POST /v1/webhooks returned it"),
]
LIMITED = {
    409: "The account already has OUTCOMES_MAX_WEBHOOKS_PER_ACCOUNT webhooks (20 by default), "
    "active or disabled: remove one first (QUOTA_EXCEEDED, cause `webhook_limit`).",
}
NOT_FOUND = {404: "No such webhook for this token (REFERENCE_UNRESOLVED)."}
REFUSED = {
    422: "The URL is refused: not http(s), credentials in it, it does not resolve, or it "
    "resolves to this host, loopback, link-local or a private range (SSRF; unless its host is "
    "in OUTCOMES_WEBHOOK_ALLOW_HOSTS); or the body breaks the schema (INPUT_INVALID, "
    "INPUT_MISSING).",
    503: "The database is unavailable, or this ledger has no secrets key to seal the signing "
    "secret with (SOURCE_UNRELIABLE, CAPABILITY_UNAVAILABLE); retry after Retry-After.",
}


class WebhookBody(BaseModel):
    """`POST /v1/webhooks`."""

    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={"examples": [{"url": "https://hooks.example.com/outcomes"}]},
    )

    url: str = Field(min_length=1, max_length=2000, description="http:// or https://")
    account: str | None = Field(
        None,
        max_length=100,
        pattern=ACCOUNT,
        description="Whose outcomes: the token's own account by default; an operator token "
        "of every account ('*') must name one",
    )


class WebhookModel(Documented):
    id: str
    account: str
    url: str
    status: Literal["active", "disabled", "removed"] = Field(
        description="`disabled`: its deliveries failed past OUTCOMES_WEBHOOK_RETRY_FOR_S"
    )
    created_at: datetime
    changed_at: datetime
    reason: str | None = Field(description="Why it was disabled, else null")


class CreatedWebhook(WebhookModel):
    secret: str = Field(
        description="The signing secret (`whsec_…`), shown this once: verify deliveries with it"
    )


class Webhooks(Documented):
    webhooks: list[WebhookModel]


class AttemptModel(Documented):
    attempt: int
    at: datetime
    status: int | None = Field(description="The receiver's HTTP status; null when none came")
    error: str | None = Field(description="Why it failed (a non-2xx status, or no answer)")
    duration_ms: float
    relay: str | None = Field(description="The relay that made it (operators and auditors)")


class DeliveryModel(Documented):
    event_id: str = Field(description="The outcome event's id: the `webhook-id` header")
    job_id: str
    state: Literal["pending", "delivered", "failed"]
    attempts: int
    created_at: datetime
    next_attempt_at: datetime | None = Field(description="When it is tried next (pending)")
    delivered_at: datetime | None
    last_status: int | None
    last_error: str | None
    log: list[AttemptModel] = Field(description="Every attempt, oldest first")


class Deliveries(Documented):
    webhook_id: str
    deliveries: list[DeliveryModel]


def _shown(view: WebhookView) -> dict[str, object]:
    return {
        "id": view.webhook_id,
        "account": view.account,
        "url": view.url,
        "status": view.status,
        "created_at": view.created_at,
        "changed_at": view.changed_at,
        "reason": view.reason,
    }


def _attempt(attempt: Attempt, staff: bool) -> dict[str, object]:
    return {
        "attempt": attempt.attempt,
        "at": attempt.at,
        "status": attempt.status,
        "error": attempt.error,
        "duration_ms": attempt.duration_ms,
        "relay": attempt.relay if staff else None,
    }


def _key(webhook_id: str) -> str:
    try:
        return str(uuid.UUID(webhook_id))
    except ValueError:
        raise WebhookNotFoundError(webhook_id) from None


def _target_account(caller: TokenView, account: str | None) -> str:
    """Whose outcomes a registration is for: the token's account; an operator of every
    account names one."""
    if caller.account == ALL_ACCOUNTS:
        if account is None:
            raise invalid_input(
                "The request is missing account.",
                missing=True,
                fix="an operator token of every account names the account: send account",
            )
        return account
    if account not in (None, caller.account):
        raise forbidden(
            f"account:{account}", "This token may not register webhooks for another account."
        )
    return caller.account


def _every_tool(caller: TokenView, doing: str) -> None:
    """A webhook receives the outcomes of every tool of its account: a token limited to some
    tools neither adds one nor takes one away."""
    if caller.tools is not None:
        raise forbidden(
            "tools:*",
            f"A token limited to some tools may not {doing}: a webhook receives every "
            "tool's outcomes for the account.",
        )


@router.post(
    "/v1/webhooks",
    response_model=CreatedWebhook,
    status_code=201,
    summary="Register a URL for the account's terminal outcomes (agents, operators)",
    responses=problems(401, 403, 409, 422, 503, overrides=REFUSED | LIMITED),
)
def create_webhook(
    request: Request,
    body: WebhookBody,
    caller: Annotated[TokenView, Depends(MANAGE)],
) -> Response:
    state = state_of(request)
    _every_tool(caller, "register webhooks")
    account = _target_account(caller, body.account)
    settings = state.settings
    made = webhooks.register(
        state.ledger,
        account,
        body.url,
        caller.token_id,
        settings.webhook_allow_hosts,
        settings.max_webhooks_per_account,
    )
    return json_response(_shown(made.view) | {"secret": made.secret}, 201)


@router.get(
    "/v1/webhooks",
    response_model=Webhooks,
    summary="The account's webhooks (never their secrets)",
    responses=problems(401, 503),
)
def list_webhooks(request: Request, caller: Principal) -> Response:
    found = webhooks.listed(state_of(request).ledger, account_scope(caller.account))
    return json_response({"webhooks": [_shown(view) for view in found]})


@router.delete(
    "/v1/webhooks/{webhook_id}",
    response_model=WebhookModel,
    summary="Remove a webhook: nothing more is delivered to it (agents, operators)",
    responses=problems(401, 403, 404, 503, overrides=NOT_FOUND),
)
def delete_webhook(
    request: Request,
    webhook_id: WebhookId,
    caller: Annotated[TokenView, Depends(MANAGE)],
) -> Response:
    ledger = state_of(request).ledger
    _every_tool(caller, "remove webhooks")
    key = _key(webhook_id)
    view = webhooks.remove(ledger, key, account_scope(caller.account), caller.token_id)
    return json_response(_shown(view))


@router.get(
    "/v1/webhooks/{webhook_id}/deliveries",
    response_model=Deliveries,
    summary="What was delivered to a webhook, the latest outcome first, with every attempt",
    responses=problems(401, 404, 422, 503, overrides=NOT_FOUND),
)
def list_deliveries(
    request: Request,
    webhook_id: WebhookId,
    caller: Principal,
    limit: Annotated[int, Query(ge=1, le=webhooks.MAX_DELIVERIES)] = 100,
) -> Response:
    key = _key(webhook_id)
    staff = caller.role in DETAIL_ROLES
    logs = webhooks.deliveries(state_of(request).ledger, key, account_scope(caller.account), limit)
    items = [
        {
            "event_id": log.delivery.event_id,
            "job_id": log.delivery.job_id,
            "state": log.delivery.state,
            "attempts": log.delivery.attempts,
            "created_at": log.delivery.created_at,
            "next_attempt_at": (
                log.delivery.next_attempt_at if log.delivery.state == "pending" else None
            ),
            "delivered_at": log.delivery.delivered_at,
            "last_status": log.delivery.last_status,
            "last_error": log.delivery.last_error,
            "log": [_attempt(a, staff) for a in log.attempts],
        }
        for log in logs
    ]
    return json_response({"webhook_id": key, "deliveries": items})

"""API tokens: created (shown once), stored hashed, scoped to an account and a role; and the
one way a presented token is checked."""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from ledger.access import (
    hash_token,
    new_token,
    token_stream,
    validate_account,
    validate_role,
)
from ledger.errors import NotAuthenticatedError, TokenError
from ledger.events import NewEvent, TokenCreated, TokenRevoked
from ledger.persistence.base import NO_STREAM
from ledger.services.ledger import Ledger
from ledger.token_view import TokenView


@dataclass(frozen=True)
class IssuedToken:
    view: TokenView
    token: str  # the secret; returned once, never stored


def create(
    ledger: Ledger, account: str, role: str, tools: list[str] | None, actor: str
) -> IssuedToken:
    validate_account(account)
    validate_role(role)
    token_id = str(uuid.uuid4())
    secret = new_token()
    payload = TokenCreated(
        token_id=token_id,
        account=account,
        role=role,
        tools=sorted(set(tools)) if tools else None,
        token_hash=hash_token(secret),
    )
    event = NewEvent(payload=payload, actor=actor)
    with ledger.store.transaction() as tx:
        view = tx.append(token_stream(token_id), [event], NO_STREAM).token
    return IssuedToken(view, secret)


def revoke(ledger: Ledger, token_id: str, actor: str) -> TokenView:
    with ledger.store.transaction() as tx:
        view = tx.token(token_id)
        if view is None:
            raise TokenError(f"no token {token_id}")
        if view.revoked:
            return view
        event = NewEvent(payload=TokenRevoked(token_id=token_id), actor=actor)
        return tx.append(token_stream(token_id), [event], 1).token


def list_all(ledger: Ledger) -> list[TokenView]:
    with ledger.store.reading() as reads:
        return reads.tokens()


def authenticate(ledger: Ledger, token: str) -> TokenView:
    """The caller behind a presented token; NotAuthenticatedError when there is none."""
    with ledger.store.quick_read() as reads:
        return admit(reads.token_by_hash(hash_token(token)))


def admit(view: TokenView | None) -> TokenView:
    """The one rule for a presented token: it exists and is not revoked (a caller is never
    told which of the two failed)."""
    if view is None or view.revoked:
        raise NotAuthenticatedError()
    return view

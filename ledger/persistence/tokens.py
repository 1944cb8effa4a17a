"""API tokens: created (shown once), stored hashed, scoped to an account and a role."""

from __future__ import annotations

import hashlib
import re
import secrets
import uuid
from dataclasses import dataclass

from sqlalchemy import Connection, select

from ledger.errors import LedgerError
from ledger.events import NewEvent, TokenCreated, TokenRevoked
from ledger.persistence.schema import tokens
from ledger.persistence.store import NO_STREAM, EventStore
from ledger.token_view import TokenView

ROLES = ("agent", "operator", "auditor")
ALL_ACCOUNTS = "*"
ACCOUNT = re.compile(r"^[a-z0-9][a-z0-9_-]*$")
TOKEN_PREFIX = "ol_"


class TokenError(LedgerError):
    """A token request that cannot be honoured (bad account, role, or unknown token)."""


@dataclass(frozen=True)
class IssuedToken:
    view: TokenView
    token: str  # the secret; returned once, never stored


def token_stream(token_id: str) -> str:
    return f"token-{token_id}"


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def validate_account(account: str, *, allow_all: bool = True) -> str:
    if (allow_all and account == ALL_ACCOUNTS) or ACCOUNT.match(account):
        return account
    raise TokenError(f"account {account!r} must match [a-z0-9][a-z0-9_-]* (or '*' for all)")


def create_token(
    store: EventStore, account: str, role: str, tools: list[str] | None, actor: str
) -> IssuedToken:
    validate_account(account)
    if role not in ROLES:
        raise TokenError(f"role {role!r} must be one of {', '.join(ROLES)}")
    token_id = str(uuid.uuid4())
    secret = TOKEN_PREFIX + secrets.token_urlsafe(32)
    payload = TokenCreated(
        token_id=token_id,
        account=account,
        role=role,
        tools=sorted(set(tools)) if tools else None,
        token_hash=hash_token(secret),
    )
    with store.transaction() as tx:
        tx.append(token_stream(token_id), [NewEvent(payload=payload, actor=actor)], NO_STREAM)
        row = tx.conn.execute(select(tokens.c.view).where(tokens.c.token_id == token_id)).one()
    return IssuedToken(TokenView.model_validate(row.view), secret)


def revoke_token(store: EventStore, token_id: str, actor: str) -> TokenView:
    with store.transaction() as tx:
        row = tx.conn.execute(select(tokens.c.view).where(tokens.c.token_id == token_id)).first()
        if row is None:
            raise TokenError(f"no token {token_id}")
        view = TokenView.model_validate(row.view)
        if view.revoked:
            return view
        tx.append(
            token_stream(token_id),
            [NewEvent(payload=TokenRevoked(token_id=token_id), actor=actor)],
            1,
        )
        row = tx.conn.execute(select(tokens.c.view).where(tokens.c.token_id == token_id)).one()
        return TokenView.model_validate(row.view)


def load_token(conn: Connection, token: str) -> TokenView | None:
    """The token's view when it exists and is not revoked; None otherwise (no detail why)."""
    query = select(tokens.c.view).where(tokens.c.token_hash == hash_token(token))
    row = conn.execute(query).first()
    if row is None:
        return None
    view = TokenView.model_validate(row.view)
    return None if view.revoked else view


def authenticate(store: EventStore, token: str) -> TokenView | None:
    with store.reading() as conn:
        return load_token(conn, token)


def list_tokens(store: EventStore) -> list[TokenView]:
    with store.reading() as conn:
        rows = conn.execute(select(tokens.c.view).order_by(tokens.c.ledger_position)).all()
    return [TokenView.model_validate(r.view) for r in rows]

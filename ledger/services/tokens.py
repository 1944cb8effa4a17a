"""API tokens: created (shown once), stored hashed, scoped to an account and a role; and the
one way a presented token is checked."""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass

from ledger.access import (
    admissible,
    hash_token,
    new_token,
    token_stream,
    validate_account,
    validate_role,
    validate_scope,
)
from ledger.errors import NotAuthenticatedError, TokenError
from ledger.events import NewEvent, TokenCreated, TokenRevoked
from ledger.persistence.appends import NO_STREAM
from ledger.runtime.ledger import Ledger
from ledger.token_view import TokenView
from ledger.tools import TOOL_NAME, get_tool
from ledger.uuid7 import new_id


@dataclass(frozen=True)
class IssuedToken:
    view: TokenView
    token: str  # the secret; returned once, never stored


def create(
    ledger: Ledger,
    account: str,
    role: str,
    tools: list[str] | None,
    actor: str,
    *,
    allow_unknown_tools: bool = False,
) -> IssuedToken:
    """`tools` None: every tool. Otherwise the token may call only the tools named, each of
    them registered in this process (OUTCOMES_TOOLS) unless `allow_unknown_tools`."""
    validate_account(account)
    validate_role(role)
    validate_scope(account, role)
    allowed = allowed_tools(tools, allow_unknown=allow_unknown_tools)
    token_id = new_id()
    secret = new_token()
    payload = TokenCreated(
        token_id=token_id,
        account=account,
        role=role,
        tools=allowed,
        token_hash=hash_token(secret),
    )
    event = NewEvent(payload=payload, actor=actor)
    with ledger.store.transaction() as tx:
        view = tx.append(token_stream(token_id), [event], NO_STREAM).token
    return IssuedToken(view, secret)


def allowed_tools(tools: list[str] | None, *, allow_unknown: bool) -> list[str] | None:
    """The token's tool list, refused when it would not restrict what was meant to: an empty
    list would be stored as "every tool", and a misspelt name grants nothing the operator
    intended."""
    if tools is None:
        return None
    names = sorted({name.strip() for name in tools if name.strip()})
    if not names:
        raise TokenError("the tool list names no tool (leave it out for a token of every tool)")
    malformed = [name for name in names if not TOOL_NAME.fullmatch(name)]
    if malformed:
        raise TokenError(f"not tool names: {', '.join(malformed)} (like 'area.verb_noun')")
    unknown = [name for name in names if get_tool(name) is None]
    if unknown and not allow_unknown:
        raise TokenError(
            f"unknown tools: {', '.join(unknown)} (not loaded from OUTCOMES_TOOLS); "
            "use --allow-unknown-tools to grant them anyway"
        )
    return names


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


def current(ledger: Ledger, token_id: str) -> TokenView:
    """A token known by its id (a console session keeps the id, never the secret), checked
    again as a presented one is: revoked since sign-in means NotAuthenticatedError now."""
    with ledger.store.quick_read() as reads:
        return admit(reads.token(token_id))


def admit(view: TokenView | None) -> TokenView:
    """The one rule for a presented token: it exists, is not revoked, and has a scope its role
    may hold (an agent token for '*' recorded before that was refused reads nothing). A caller
    is never told which of these failed."""
    if view is None or view.revoked or not admissible(view.account, view.role):
        raise NotAuthenticatedError()
    return view


class AdmittedTokens:
    """The tokens this process has admitted, by hash, for a write that re-checks them itself.

    A submit admits a presented token from here without a read; its decision is appended with
    `Caller.recheck_token`, and the append refuses it (nothing written) if the token has been
    revoked meanwhile. So a revoked token is refused on its next submit by every process,
    while a submit pays no token read. Only a token that passed `authenticate` enters (a
    stranger's guesses never fill it); the least recently used leave past `size`. Routes that
    write nothing keep checking at the ledger."""

    def __init__(self, ledger: Ledger, size: int = 4096) -> None:
        self._ledger = ledger
        self._size = size
        self._views: OrderedDict[str, TokenView] = OrderedDict()
        self._lock = threading.Lock()

    def admit(self, token: str) -> TokenView:
        """The token's view: from the cache, else `authenticate`d (a read) and kept."""
        view = self.cached(token)
        if view is not None:
            return view
        digest = hash_token(token)
        view = authenticate(self._ledger, token)
        with self._lock:
            self._views[digest] = view
            while len(self._views) > self._size:
                self._views.popitem(last=False)
        return view

    def cached(self, token: str) -> TokenView | None:
        """The token's view if this process admitted it before; None: `admit` must read."""
        digest = hash_token(token)
        with self._lock:
            view = self._views.get(digest)
            if view is not None:
                self._views.move_to_end(digest)
            return view

    def forget(self, token: str) -> None:
        """After a write refused the token: the next request reads it again."""
        with self._lock:
            self._views.pop(hash_token(token), None)

"""Who is looking: the session's token, checked against the ledger on every page (a token revoked
since sign-in ends the session at its next click), and what it may see."""

from __future__ import annotations

from dataclasses import dataclass
from typing import cast

from starlette.requests import Request

from console.errors import NotForRole, SignInRequired
from console.sessions import COOKIE, Sessions
from ledger.access import DETAIL_ROLES, account_scope
from ledger.dispatch import Dispatcher
from ledger.errors import NotAuthenticatedError
from ledger.runtime.ledger import Ledger
from ledger.runtime.outbox import Outbox
from ledger.services import tokens
from ledger.token_view import TokenView


@dataclass(frozen=True)
class ConsoleState:
    """Hung on `app.state.console` by `console.web.mount` (no module globals: two apps in one
    process, as in the tests, keep their own sessions)."""

    ledger: Ledger
    sessions: Sessions
    cookie_secure: bool = False  # OUTCOMES_COOKIE_SECURE: Secure whatever the scheme seen
    allowed_origins: frozenset[str] = frozenset()  # OUTCOMES_ALLOWED_ORIGINS
    # The API's outbox (or dispatcher): an approval decided here is published at once.
    dispatcher: Dispatcher | Outbox | None = None


@dataclass(frozen=True)
class Viewer:
    token: TokenView

    @property
    def role(self) -> str:
        return self.token.role

    @property
    def account(self) -> str:
        return self.token.account

    @property
    def scope(self) -> str | None:
        """The account whose jobs this viewer sees; None: every account."""
        return account_scope(self.token.account)

    @property
    def auditor(self) -> bool:
        """Auditors see hashes (they cover the stored arguments: for anyone else a way to
        test guesses of an argument), as on `/v1/audit/events`."""
        return self.token.role == "auditor"


def state_of(request: Request) -> ConsoleState:
    return cast(ConsoleState, request.app.state.console)


def viewer_of(request: Request, roles: tuple[str, ...] = DETAIL_ROLES) -> Viewer:
    """The signed-in viewer (blocking: one ledger read); SignInRequired otherwise, and
    NotForRole for a token whose role this page is not for (an approver signs in for the
    approvals page alone)."""
    state = state_of(request)
    sid = request.cookies.get(COOKIE)
    session = state.sessions.get(sid)
    if session is None:
        raise SignInRequired("Sign in with an operator or auditor token.")
    try:
        token = tokens.current(state.ledger, session.token_id)
    except NotAuthenticatedError:
        state.sessions.close(sid)
        raise SignInRequired("That token was revoked: sign in again.") from None
    if token.role not in roles:
        raise NotForRole(f"This page is for {' and '.join(roles)} tokens.")
    return Viewer(token)

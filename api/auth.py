"""Bearer tokens (DESIGN §6): each scoped to an account (`*` = every account) and a role.

The token is hashed and looked up; it is never echoed, logged or kept. Every failure to
authenticate answers the same 401, so a caller learns nothing about which tokens exist.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Annotated

from fastapi import Depends, Security
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from starlette.requests import Request

from api.problems import forbidden, unauthorized
from api.state import state_of
from ledger.persistence.tokens import ALL_ACCOUNTS, authenticate
from ledger.token_view import TokenView

bearer = HTTPBearer(
    auto_error=False,
    scheme_name="bearer",
    description="A ledger token (`outcomes tokens create`), scoped to an account and a role.",
)


async def bearer_token(
    credentials: Annotated[HTTPAuthorizationCredentials | None, Security(bearer)],
) -> str:
    """The raw token from the header (not yet checked against the ledger)."""
    if credentials is None or not credentials.credentials:
        raise unauthorized()
    return credentials.credentials


def token_of(request: Request) -> str:
    """`bearer_token` without the dependency machinery, for the agents' hottest route (whose
    document still names the `bearer` scheme): resolving two nested dependencies per request
    costs as much as the route's own work."""
    scheme, _, token = request.headers.get("authorization", "").partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token:
        raise unauthorized()
    return token


def principal(request: Request, token: Annotated[str, Depends(bearer_token)]) -> TokenView:
    """The caller's token view: it exists and is not revoked. Runs in the thread pool."""
    view = authenticate(state_of(request).store, token)
    if view is None:
        raise unauthorized()
    return view


Principal = Annotated[TokenView, Depends(principal)]


def require(*roles: str) -> Callable[[TokenView], Awaitable[TokenView]]:
    """A dependency admitting only tokens of these roles (async: no second thread hop)."""

    async def dependency(view: Principal) -> TokenView:
        if view.role not in roles:
            raise forbidden(
                "role:" + "|".join(roles), f"This endpoint is for {' or '.join(roles)} tokens."
            )
        return view

    return dependency


def account_scope(view: TokenView) -> str | None:
    """The account whose rows this token may see; None: every account."""
    return None if view.account == ALL_ACCOUNTS else view.account


def may_see(view: TokenView, account: str) -> bool:
    return view.account in (ALL_ACCOUNTS, account)

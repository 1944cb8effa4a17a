"""Bearer tokens (contract §6): each scoped to an account (`*` = every account) and a role.

The header is read by `token_of` alone and the token checked by the ledger's one
`authenticate`; it is never echoed, logged or kept. Every failure to authenticate answers the
same 401 (`NotAuthenticatedError`, mapped in `api.handlers`), so a caller learns nothing about
which tokens exist.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Annotated

from fastapi import Depends, Security
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from starlette.requests import Request

from api.problems import forbidden
from api.state import state_of
from ledger.errors import NotAuthenticatedError
from ledger.services import tokens
from ledger.token_view import TokenView

# Documents the scheme in /openapi.json; routes that name it in `openapi_extra` instead skip
# this dependency (the agents' hottest route: nested dependencies cost as much as its work).
bearer = HTTPBearer(
    auto_error=False,
    scheme_name="bearer",
    description="A ledger token (`outcomes tokens create`), scoped to an account and a role.",
)
Scheme = Annotated[HTTPAuthorizationCredentials | None, Security(bearer)]


def token_of(request: Request) -> str:
    """The raw token from the Authorization header (not yet checked against the ledger)."""
    scheme, _, token = request.headers.get("authorization", "").partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token:
        raise NotAuthenticatedError(presented=False)
    return token


def authenticate(request: Request) -> TokenView:
    """The caller's token view: it exists and is not revoked (blocking: a ledger read)."""
    return tokens.authenticate(state_of(request).ledger, token_of(request))


def principal(request: Request, _scheme: Scheme) -> TokenView:
    """`authenticate` as a dependency. Runs in the thread pool."""
    return authenticate(request)


Principal = Annotated[TokenView, Depends(principal)]


def check_role(view: TokenView, *roles: str) -> TokenView:
    """The token's view, when its role is one of `roles`; else the 403 that names them."""
    if view.role not in roles:
        raise forbidden(
            "role:" + "|".join(roles), f"This endpoint is for {' or '.join(roles)} tokens."
        )
    return view


def require(*roles: str) -> Callable[[TokenView], Awaitable[TokenView]]:
    """A dependency admitting only tokens of these roles (async: no second thread hop)."""

    async def dependency(view: Principal) -> TokenView:
        return check_role(view, *roles)

    return dependency

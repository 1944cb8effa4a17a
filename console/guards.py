"""The guards every console route shares: the ledger's errors as console pages, and the
refusal of a form another site's page sent (login CSRF and its kind)."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import ParamSpec, TypeVar

from starlette.requests import Request

from console.errors import CrossSiteForm, LedgerUnavailable, PageNotFound, SignInRequired
from console.viewer import state_of
from ledger.errors import JobNotFoundError, NotAuthenticatedError, SchemaMissingError, StorageError
from ledger.web_origins import origin_allowed

P = ParamSpec("P")
R = TypeVar("R")


def guarded(route: Callable[P, R]) -> Callable[P, R]:
    """The ledger's errors as console pages (the API's handlers would answer problem+json)."""

    @functools.wraps(route)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return route(*args, **kwargs)
        except NotAuthenticatedError:
            raise SignInRequired("Sign in with an operator or auditor token.") from None
        except JobNotFoundError:
            raise PageNotFound("No such job (or not one of your account's).") from None
        except SchemaMissingError:
            raise LedgerUnavailable("The ledger has no tables yet: run outcomes migrate.") from None
        except StorageError:
            raise LedgerUnavailable("The ledger did not answer; reload in a moment.") from None

    return wrapper


def refuse_cross_site(request: Request) -> None:
    """A browser says where a form came from: `Sec-Fetch-Site` (set by the browser itself,
    never by a page) where it sends one, else `Origin`. Neither: a program, not a page."""
    fetch_site = request.headers.get("sec-fetch-site", "").lower()
    if fetch_site in ("same-origin", "none"):  # the console's page, or the user's own act
        return
    origin = request.headers.get("origin")
    if fetch_site == "cross-site" or (
        origin is not None
        and not origin_allowed(
            origin,
            request.headers.get("host"),
            request.url.scheme,
            state_of(request).allowed_origins,
        )
    ):
        raise CrossSiteForm("This form was sent from another site's page: nothing was done.")

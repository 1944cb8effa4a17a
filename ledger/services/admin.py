"""The ledger's schema, its read models, and the database roles its processes use."""

from __future__ import annotations

from collections.abc import Callable

from ledger.errors import StorageError
from ledger.privileges import ConnectedRole, check_role_name, no_roles
from ledger.rebuild_state import RebuildReport
from ledger.runtime.ledger import Ledger
from ledger.services import rebuild as rebuild_service


def migrate(
    ledger: Ledger, app_role: str | None = None, app_password: str | None = None
) -> tuple[str | None, str | None]:
    """Create or upgrade the schema (idempotent); (revision before, revision after).

    With `app_role` (PostgreSQL only: checked before anything changes), also create that role
    if missing and grant it what the API, workers and reconciler need, again on every run so
    that tables added by the upgrade are covered."""
    if app_role is not None:
        check_role_name(app_role)
        if ledger.dialect != "postgresql":
            raise no_roles(ledger.dialect)
    revisions = ledger.store.upgrade_schema()
    if app_role is not None:
        ledger.store.grant_app_role(app_role, app_password)
    return revisions


def grant_script(ledger: Ledger, app_role: str) -> str:
    """The SQL that `migrate(…, app_role)` runs for the role (the password aside)."""
    return ledger.store.grant_script(check_role_name(app_role))


def connected_role(ledger: Ledger) -> ConnectedRole | None:
    """Who the ledger's connections act as (None where the database has no roles)."""
    return ledger.store.connected_role()


def privilege_warning(ledger: Ledger) -> str | None:
    """One line to log when this process could rewrite history (it is connected as the owner
    of `events` or as a superuser), else None. Advisory: a database that cannot answer now
    is /readyz's and the first write's business, so it is no warning here."""
    try:
        role = connected_role(ledger)
    except StorageError:
        return None
    return role.warning() if role is not None else None


def rebuild(
    ledger: Ledger,
    progress: Callable[[int], None] | None = None,
    restart: bool = False,
    page: int = rebuild_service.PAGE,
) -> RebuildReport:
    """Rebuild every read model from the events alone, online (`ledger.services.rebuild`: a
    page of streams at a time, under those streams' own locks), resuming a rebuild stopped
    part way unless `restart`; `progress` is told how many events each page replayed."""
    return rebuild_service.rebuild(ledger, progress, restart, page)


def ready(ledger: Ledger) -> None:
    """Whether this process can serve (`/readyz`): the database answers a trivial statement on
    a pooled connection and its schema is not older than this code's (asked until seen once).
    Raises a `StorageError` when not. A handful of O(1) checks: it reads nothing of the ledger,
    so it answers as fast at a billion events as at none."""
    ledger.store.check_ready()

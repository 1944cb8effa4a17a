"""Who the ledger's processes connect as, and whether that role could rewrite history.

On PostgreSQL the triggers on `events` refuse UPDATE, DELETE and TRUNCATE, but the table's
owner (or a role that may act as it) can disable them, and a superuser can do anything. So
`outcomes migrate` runs as the owner and creates an application role (`--app-role`) that may
only read and append events; the API, workers and reconciler connect as that role and warn
when they find themselves connected as the owner or a superuser (docs/deploy.md).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ledger.errors import ConfigurationError

# Plain identifiers only: they are quoted anyway, but a name an operator must type in a URL
# and in psql should not need quoting to be found again.
_ROLE_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,62}")


@dataclass(frozen=True)
class ConnectedRole:
    """A database role as the ledger sees it."""

    name: str
    superuser: bool
    owns_events: bool  # owns `events`, or is a member of the role that does

    @property
    def can_rewrite_history(self) -> bool:
        return self.superuser or self.owns_events

    def warning(self) -> str | None:
        """One line for the logs when this role could switch the append-only guard off."""
        if not self.can_rewrite_history:
            return None
        what = "a superuser" if self.superuser else "the owner of the events table"
        return (
            f"connected to the ledger as {self.name!r}, {what}: it can disable the triggers "
            "that keep events append-only. Run `outcomes migrate --app-role NAME` as the "
            "owner and connect the API, workers and reconciler as NAME (docs/deploy.md)."
        )


def check_role_name(name: str) -> str:
    """The application role's name, if it is a plain identifier; ConfigurationError if not."""
    if not _ROLE_NAME.fullmatch(name) or name.lower().startswith("pg_"):
        raise ConfigurationError(
            f"bad role name {name!r}: use letters, digits and _ (at most 63, not pg_…)"
        )
    return name


def no_roles(dialect: str) -> ConfigurationError:
    """Why a ledger that is not on PostgreSQL cannot have an application role."""
    if dialect == "sqlite":
        return ConfigurationError(
            "SQLite has no database roles: --app-role is for PostgreSQL. An embedded ledger is "
            "protected by its file's permissions, and by digests kept elsewhere."
        )
    return ConfigurationError(f"the {dialect} ledger has no database roles (PostgreSQL has)")

"""The ledger's schema and read models."""

from __future__ import annotations

from ledger.services.ledger import Ledger


def migrate(ledger: Ledger) -> tuple[str | None, str | None]:
    """Create or upgrade the schema (idempotent); (revision before, revision after)."""
    return ledger.store.upgrade_schema()


def rebuild(ledger: Ledger) -> int:
    """Rebuild every read model from the events alone, in one transaction (appends wait);
    returns how many events were replayed."""
    return ledger.store.rebuild_read_models()


def check(ledger: Ledger) -> int:
    """The last ledger position: proof that the database answers (raises when it does not)."""
    return ledger.store.last_position()

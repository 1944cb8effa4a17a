"""Time as the ledger records it: aware UTC, and one text form (the one the hashes cover)."""

from __future__ import annotations

from datetime import UTC, datetime


def now() -> datetime:
    return datetime.now(UTC)


def utc(moment: datetime) -> datetime:
    """Aware UTC datetime; naive values (SQLite hands them back) are taken as UTC."""
    if moment.tzinfo is None:
        return moment.replace(tzinfo=UTC)
    return moment.astimezone(UTC)


def format_time(moment: datetime) -> str:
    return utc(moment).strftime("%Y-%m-%dT%H:%M:%S.%fZ")

"""Named locks as transaction-level advisory locks on Postgres (SQLite's BEGIN IMMEDIATE
already serializes every writer, so they are no-ops there). Released at commit or rollback."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

from sqlalchemy import Connection, text

from ledger.persistence.base import BRAKES_LOCK

# The brakes lock keeps the number it always had, so that workers and `brake pull` of two
# releases still exclude each other during a rolling deploy.
BRAKE_LOCK_KEY = 0x6F757463_6272616B & 0x7FFFFFFFFFFFFFFF  # "outc" "brak"
_EXCLUSIVE = text("SELECT pg_advisory_xact_lock(:k)")
_SHARED = text("SELECT pg_advisory_xact_lock_shared(:k)")


def key_for(*parts: str) -> int:
    if parts == (BRAKES_LOCK,):
        return BRAKE_LOCK_KEY
    digest = hashlib.sha256("\x1f".join(parts).encode()).digest()
    return int.from_bytes(digest[:8], "big", signed=True)


def lock(conn: Connection, key: Sequence[str], *, shared: bool = False) -> None:
    if conn.dialect.name == "postgresql":
        conn.execute(_SHARED if shared else _EXCLUSIVE, {"k": key_for(*key)})

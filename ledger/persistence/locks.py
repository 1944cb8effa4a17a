"""Transaction-level advisory locks on Postgres (SQLite's BEGIN IMMEDIATE already serializes
every writer, so these are no-ops there). Released at commit or rollback."""

from __future__ import annotations

import hashlib

from sqlalchemy import Connection, text

# Workers take it shared while they check the brake and claim a job; `brake pull` takes it
# exclusive, so no work starts after a pull has committed.
BRAKE_LOCK_KEY = 0x6F757463_6272616B & 0x7FFFFFFFFFFFFFFF  # "outc" "brak"


def _postgres(conn: Connection) -> bool:
    return conn.dialect.name == "postgresql"


def key_for(*parts: str) -> int:
    digest = hashlib.sha256("\x1f".join(parts).encode()).digest()
    return int.from_bytes(digest[:8], "big", signed=True)


def lock_exclusive(conn: Connection, key: int) -> None:
    if _postgres(conn):
        conn.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": key})


def lock_shared(conn: Connection, key: int) -> None:
    if _postgres(conn):
        conn.execute(text("SELECT pg_advisory_xact_lock_shared(:k)"), {"k": key})

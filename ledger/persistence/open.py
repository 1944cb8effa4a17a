"""Open the ledger named by a URL: SQL (postgresql+psycopg://, sqlite:///) or `memory://`."""

from __future__ import annotations

from ledger.persistence.base import Store
from ledger.persistence.engine import make_engine
from ledger.persistence.memory import MEMORY_URL, MemoryStore
from ledger.persistence.sql_store import SqlStore


def open_store(url: str, *, pool_size: int = 5) -> Store:
    if url == MEMORY_URL:
        return MemoryStore()
    return SqlStore(make_engine(url, pool_size=pool_size))

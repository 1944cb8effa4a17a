"""Open the ledger named by the settings: engine, store and its read models."""

from __future__ import annotations

from ledger.persistence.engine import make_engine
from ledger.persistence.projections import default_projections
from ledger.persistence.store import EventStore
from ledger.settings import load_settings


def open_store(url: str | None = None, *, pool_size: int = 5) -> EventStore:
    engine = make_engine(url or load_settings().database_url, pool_size=pool_size)
    return EventStore(engine, default_projections())

"""Configuration from the environment (contract §6), read in one place."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from ledger.errors import ConfigurationError

DEFAULT_HOME = Path(".outcomes")


def _float(name: str, default: float) -> float:
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = float(raw)
    except ValueError:
        raise ConfigurationError(f"{name} must be a number of seconds, got {raw!r}") from None
    if value <= 0:
        raise ConfigurationError(f"{name} must be positive, got {raw!r}")
    return value


@dataclass(frozen=True)
class Settings:
    database_url: str
    broker_url: str | None
    tools: tuple[str, ...]
    queue: str
    lease_s: float
    dispatch_timeout_s: float

    @property
    def embedded(self) -> bool:
        return self.database_url.startswith("sqlite")


def default_database_url(home: Path = DEFAULT_HOME) -> str:
    return f"sqlite:///{home / 'ledger.db'}"


def load_settings() -> Settings:
    tools = tuple(t.strip() for t in os.environ.get("OUTCOMES_TOOLS", "").split(",") if t.strip())
    return Settings(
        database_url=os.environ.get("OUTCOMES_DATABASE_URL") or default_database_url(),
        broker_url=os.environ.get("OUTCOMES_BROKER_URL") or None,
        tools=tools,
        queue=os.environ.get("OUTCOMES_QUEUE") or "outcomes",
        lease_s=_float("OUTCOMES_LEASE_S", 30.0),
        dispatch_timeout_s=_float("OUTCOMES_DISPATCH_TIMEOUT_S", 30.0),
    )

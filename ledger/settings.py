"""Configuration from the environment (contract §6), read in one place.

Every value is checked here, once: a malformed one is a one-line `ConfigurationError`, never a
traceback later nor a value quietly taken (`float("nan")` compares false with every bound, so
ranges are checked for finiteness first)."""

from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass
from pathlib import Path

from ledger.errors import ConfigurationError

DEFAULT_HOME = Path(".outcomes")
MAX_SECONDS = 86400.0  # a day: longer leases or dispatch deadlines are typos, not policies
MODULE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$")
FLAGS = {"1": True, "true": True, "yes": True, "on": True}
FLAGS |= {"0": False, "false": False, "no": False, "off": False}
QUEUE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,199}$")


def _raw(name: str) -> str | None:
    raw = os.environ.get(name)
    return None if raw is None or raw.strip() == "" else raw.strip()


def _seconds(name: str, default: float, high: float = MAX_SECONDS) -> float:
    """A duration in seconds: a finite number, more than 0 and at most `high`."""
    raw = _raw(name)
    if raw is None:
        return default
    try:
        value = float(raw)
    except ValueError:
        raise ConfigurationError(f"{name} must be a number of seconds, got {raw!r}") from None
    if not math.isfinite(value) or not 0 < value <= high:
        raise ConfigurationError(f"{name} must be more than 0 and at most {high:g}, got {raw!r}")
    return value


def _count(name: str, default: int, low: int, high: int) -> int:
    raw = _raw(name)
    if raw is None:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ConfigurationError(f"{name} must be a whole number, got {raw!r}") from None
    if not low <= value <= high:
        raise ConfigurationError(f"{name} must be from {low} to {high}, got {raw!r}")
    return value


def _tools() -> tuple[str, ...]:
    names = tuple(t.strip() for t in os.environ.get("OUTCOMES_TOOLS", "").split(",") if t.strip())
    for name in names:
        if not MODULE.match(name):
            raise ConfigurationError(f"OUTCOMES_TOOLS: {name!r} is not a module name")
    return names


def _choice(name: str, default: str, allowed: tuple[str, ...]) -> str:
    raw = _raw(name)
    if raw is None:
        return default
    if raw.lower() not in allowed:
        raise ConfigurationError(f"{name} must be one of {', '.join(allowed)}, got {raw!r}")
    return raw.lower()


def _flag(name: str) -> bool:
    raw = _raw(name)
    if raw is None:
        return False
    value = raw.lower()
    if value not in FLAGS:
        raise ConfigurationError(f"{name} must be one of {', '.join(FLAGS)}, got {raw!r}")
    return FLAGS[value]


def _port(name: str) -> int | None:
    return None if _raw(name) is None else _count(name, 0, 1, 65535)


def _queue() -> str:
    queue = _raw("OUTCOMES_QUEUE") or "outcomes"
    if not QUEUE.match(queue):
        raise ConfigurationError(
            f"OUTCOMES_QUEUE must match {QUEUE.pattern} (letters, digits, . _ : -), got {queue!r}"
        )
    return queue


@dataclass(frozen=True)
class Settings:
    database_url: str
    broker_url: str | None
    tools: tuple[str, ...]
    queue: str
    lease_s: float
    dispatch_timeout_s: float
    redis_visibility_s: int = 3600  # Redis redelivers unacknowledged work after this
    prefetch: int = 4  # messages a worker process reserves per execution slot
    log_format: str = "text"  # or "json": one object per line (docs/operations.md)
    metrics_open: bool = False  # True: the API's /metrics answers without a token
    metrics_port: int | None = None  # a worker serves its own /metrics here (None: not)
    metrics_host: str = "127.0.0.1"
    task_events: bool = False  # Celery task events, for Flower (OUTCOMES_TASK_EVENTS)

    @property
    def embedded(self) -> bool:
        return self.database_url.startswith("sqlite")


def default_database_url(home: Path = DEFAULT_HOME) -> str:
    return f"sqlite:///{home / 'ledger.db'}"


def load_settings() -> Settings:
    return Settings(
        database_url=_raw("OUTCOMES_DATABASE_URL") or default_database_url(),
        broker_url=_raw("OUTCOMES_BROKER_URL"),
        tools=_tools(),
        queue=_queue(),
        lease_s=_seconds("OUTCOMES_LEASE_S", 30.0),
        dispatch_timeout_s=_seconds("OUTCOMES_DISPATCH_TIMEOUT_S", 30.0),
        redis_visibility_s=_count("OUTCOMES_REDIS_VISIBILITY_S", 3600, 1, 7 * 86400),
        prefetch=_count("OUTCOMES_PREFETCH", 4, 1, 1000),
        log_format=_choice("OUTCOMES_LOG_FORMAT", "text", ("text", "json")),
        metrics_open=_flag("OUTCOMES_METRICS_OPEN"),
        metrics_port=_port("OUTCOMES_METRICS_PORT"),
        metrics_host=_raw("OUTCOMES_METRICS_HOST") or "127.0.0.1",
        task_events=_flag("OUTCOMES_TASK_EVENTS"),
    )

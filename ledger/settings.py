"""Configuration from the environment (contract §6), read in one place.

Every value is checked here, once: a malformed one is a one-line `ConfigurationError`, never a
traceback later nor a value quietly taken (`float("nan")` compares false with every bound, so
ranges are checked for finiteness first)."""

from __future__ import annotations

import ipaddress
import math
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from ledger.errors import ConfigurationError
from ledger.web_origins import canonical_origin, split_authority

DEFAULT_MAX_WEBHOOKS_PER_ACCOUNT = 20

DEFAULT_HOME = Path(".outcomes")
MAX_SECONDS = 86400.0  # a day: longer leases or relay delays are typos, not policies
MODULE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$")
FLAGS = {"1": True, "true": True, "yes": True, "on": True}
FLAGS |= {"0": False, "false": False, "no": False, "off": False}
QUEUE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,199}$")
# Connections one API process serves at once (uvicorn's limit_concurrency): long-polls and MCP
# calls hold theirs up to a minute, so a thousand waiting agents; past it, 503 at once.
MAX_CONNECTIONS = 1000
# How long an idle kept-alive connection stays open. Longer than what clients and proxies keep
# one idle (httpx 5 s, Node's fetch 4 s, a load balancer's usual 60 s), so the client side always
# closes first: a server that closes the moment a client reuses the connection fails that
# request (uvicorn's own default, 5 s, races httpx's exactly).
KEEP_ALIVE_S = 75.0
# A connection must have sent a request's headers this long after it opened (or after its
# request began): one that sends nothing, or drips, is closed (docs/deploy.md).
HEADER_TIMEOUT_S = 10.0
# Connections one client address may hold at once (the proxies in OUTCOMES_FORWARDED_ALLOW_IPS
# are exempt: every client behind them shares their address).
MAX_CONNECTIONS_PER_CLIENT = 100


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


def _rate(name: str) -> float:
    """A rate per second: 0 (off) or a finite positive number."""
    raw = _raw(name)
    if raw is None:
        return 0.0
    try:
        value = float(raw)
    except ValueError:
        raise ConfigurationError(f"{name} must be a number per second, got {raw!r}") from None
    if not math.isfinite(value) or not 0 <= value <= 1_000_000:
        raise ConfigurationError(f"{name} must be from 0 (off) to 1000000, got {raw!r}")
    return value


def _tools() -> tuple[str, ...]:
    names = tuple(t.strip() for t in os.environ.get("OUTCOMES_TOOLS", "").split(",") if t.strip())
    for name in names:
        if not MODULE.fullmatch(name):
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
    if not QUEUE.fullmatch(queue):
        raise ConfigurationError(
            f"OUTCOMES_QUEUE must match {QUEUE.pattern} (letters, digits, . _ : -), got {queue!r}"
        )
    return queue


def _list(name: str) -> tuple[str, ...]:
    return tuple(v.strip() for v in (_raw(name) or "").split(",") if v.strip())


def _forwarded_allow_ips() -> tuple[str, ...]:
    """The proxies whose X-Forwarded-Proto/-For are believed: addresses or networks, or `*`."""
    name = "OUTCOMES_FORWARDED_ALLOW_IPS"
    values = _list(name)
    if values == ("*",):
        return values
    for value in values:
        try:
            if "/" in value:
                ipaddress.ip_network(value, strict=False)
            else:
                ipaddress.ip_address(value)
        except ValueError:
            raise ConfigurationError(
                f"{name}: {value!r} is not an IP address or network (or use * alone)"
            ) from None
    return values


def _origins() -> frozenset[str]:
    name = "OUTCOMES_ALLOWED_ORIGINS"
    found = set()
    for value in _list(name):
        canonical = canonical_origin(value)
        if canonical is None:
            raise ConfigurationError(
                f"{name}: {value!r} is not an origin (scheme://host[:port], http or https, no path)"
            )
        found.add(canonical)
    return frozenset(found)


def _hosts() -> frozenset[str]:
    name = "OUTCOMES_ALLOWED_HOSTS"
    found = set()
    for value in _list(name):
        split = split_authority(value)
        if split is None or split[1] is not None:
            raise ConfigurationError(f"{name}: {value!r} is not a host name (no port, no scheme)")
        found.add(split[0])
    return frozenset(found)


def _webhook_hosts() -> frozenset[str]:
    """OUTCOMES_WEBHOOK_ALLOW_HOSTS: host names or addresses exempt from the SSRF rule."""
    name = "OUTCOMES_WEBHOOK_ALLOW_HOSTS"
    found = set()
    for value in _list(name):
        host = value.lower().strip("[]")
        if not host or any(c in host for c in "/@ ") or "://" in value:
            raise ConfigurationError(f"{name}: {value!r} is not a host name (no scheme, no path)")
        found.add(host)
    return frozenset(found)


def _partition_size() -> int | None:
    if _raw("OUTCOMES_PARTITION_SIZE") is None:
        return None
    return _count("OUTCOMES_PARTITION_SIZE", 1_000_000, 10, 10**12)


@dataclass(frozen=True)
class Settings:
    database_url: str
    broker_url: str | None
    tools: tuple[str, ...]
    queue: str
    lease_s: float
    # How long a decision's message may go unconfirmed before the reconciler's relay publishes
    # it (its deciding process had that long: it died, or the broker was away).
    dispatch_timeout_s: float
    redis_visibility_s: int = 3600  # Redis redelivers unacknowledged work after this
    prefetch: int = 4  # messages a worker process reserves per execution slot
    log_format: str = "text"  # or "json": one object per line (docs/operations.md)
    metrics_open: bool = False  # True: the API's /metrics answers without a token
    metrics_port: int | None = None  # a worker serves its own /metrics here (None: not)
    metrics_host: str = "127.0.0.1"
    task_events: bool = False  # Celery task events, for Flower (OUTCOMES_TASK_EVENTS)
    # The keys that seal declared secret arguments (ledger.keyring), never in the database.
    secrets_key: str | None = field(default=None, repr=False)
    secrets_key_file: str | None = None
    # Ed25519 key that signs tree heads (ledger.receipts.signing_key_from): PEM, or the seed.
    signing_key: str | None = field(default=None, repr=False)
    # The API behind a proxy or load balancer (docs/deploy.md, "Behind a load balancer").
    forwarded_allow_ips: tuple[str, ...] = ()  # empty: X-Forwarded-* headers are ignored
    cookie_secure: bool = False  # True: the console's cookie is Secure whatever the scheme
    allowed_origins: frozenset[str] = frozenset()  # other origins' pages allowed (canonical)
    allowed_hosts: frozenset[str] = frozenset()  # Host names /mcp answers (empty: see there)
    max_connections: int = MAX_CONNECTIONS  # per API process
    keep_alive_s: float = KEEP_ALIVE_S  # idle kept-alive connections (OUTCOMES_KEEP_ALIVE_S)
    header_timeout_s: float = HEADER_TIMEOUT_S  # to a request's whole headers
    max_connections_per_client: int = MAX_CONNECTIONS_PER_CLIENT  # per client address
    # Webhook deliveries (docs/webhooks.md): retried this long after the first attempt, with
    # a backoff doubling from `webhook_backoff_s` up to its max; then the endpoint is disabled.
    webhook_retry_for_s: float = 86400.0
    webhook_backoff_s: float = 5.0
    webhook_backoff_max_s: float = 3600.0
    webhook_timeout_s: float = 10.0
    webhook_allow_hosts: frozenset[str] = frozenset()
    webhook_keep_days: int = 7  # settled deliveries and their attempts kept this long
    # Webhooks (active or disabled) one account may have: each one multiplies every outcome's
    # deliveries, so an agent may not register them without end.
    max_webhooks_per_account: int = DEFAULT_MAX_WEBHOOKS_PER_ACCOUNT
    # Partitions (Postgres, docs/archive.md): positions per partition at the ledger's first
    # migration (later ones apply to the partitions made after), and how many the sequencer's
    # leader keeps made above the newest write position.
    partition_size: int | None = None
    partitions_ahead: int = 2
    # Per-account fairness (docs/fairness.md); 0 turns each off.
    rate_limit_per_s: float = 0.0  # submits per second per account, across the API processes
    rate_limit_burst: int = 0  # the bucket's size (0: one second's worth)
    account_concurrency: int = 0  # running jobs per account across the fleet
    account_window: int = 0  # messages per account queued in the broker at once

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
        dispatch_timeout_s=_seconds("OUTCOMES_DISPATCH_TIMEOUT_S", 5.0),
        redis_visibility_s=_count("OUTCOMES_REDIS_VISIBILITY_S", 3600, 1, 7 * 86400),
        prefetch=_count("OUTCOMES_PREFETCH", 4, 1, 1000),
        log_format=_choice("OUTCOMES_LOG_FORMAT", "text", ("text", "json")),
        metrics_open=_flag("OUTCOMES_METRICS_OPEN"),
        metrics_port=_port("OUTCOMES_METRICS_PORT"),
        metrics_host=_raw("OUTCOMES_METRICS_HOST") or "127.0.0.1",
        task_events=_flag("OUTCOMES_TASK_EVENTS"),
        secrets_key=_raw("OUTCOMES_SECRETS_KEY"),
        secrets_key_file=_raw("OUTCOMES_SECRETS_KEY_FILE"),
        signing_key=_raw("OUTCOMES_SIGNING_KEY"),
        forwarded_allow_ips=_forwarded_allow_ips(),
        cookie_secure=_flag("OUTCOMES_COOKIE_SECURE"),
        allowed_origins=_origins(),
        allowed_hosts=_hosts(),
        max_connections=_count("OUTCOMES_MAX_CONNECTIONS", MAX_CONNECTIONS, 1, 1_000_000),
        keep_alive_s=_seconds("OUTCOMES_KEEP_ALIVE_S", KEEP_ALIVE_S, 3600.0),
        header_timeout_s=_seconds("OUTCOMES_HEADER_TIMEOUT_S", HEADER_TIMEOUT_S, 300.0),
        max_connections_per_client=_count(
            "OUTCOMES_MAX_CONNECTIONS_PER_CLIENT", MAX_CONNECTIONS_PER_CLIENT, 1, 1_000_000
        ),
        webhook_retry_for_s=_seconds("OUTCOMES_WEBHOOK_RETRY_FOR_S", 86400.0, 30 * 86400.0),
        webhook_backoff_s=_seconds("OUTCOMES_WEBHOOK_BACKOFF_S", 5.0),
        webhook_backoff_max_s=_seconds("OUTCOMES_WEBHOOK_BACKOFF_MAX_S", 3600.0),
        webhook_timeout_s=_seconds("OUTCOMES_WEBHOOK_TIMEOUT_S", 10.0, 300.0),
        webhook_allow_hosts=_webhook_hosts(),
        webhook_keep_days=_count("OUTCOMES_WEBHOOK_KEEP_DAYS", 7, 1, 3650),
        max_webhooks_per_account=_count(
            "OUTCOMES_MAX_WEBHOOKS_PER_ACCOUNT", DEFAULT_MAX_WEBHOOKS_PER_ACCOUNT, 1, 10_000
        ),
        partition_size=_partition_size(),
        partitions_ahead=_count("OUTCOMES_PARTITIONS_AHEAD", 2, 2, 100),
        rate_limit_per_s=_rate("OUTCOMES_RATE_LIMIT_PER_S"),
        rate_limit_burst=_count("OUTCOMES_RATE_LIMIT_BURST", 0, 0, 1_000_000),
        account_concurrency=_count("OUTCOMES_ACCOUNT_CONCURRENCY", 0, 0, 1_000_000),
        account_window=_count("OUTCOMES_ACCOUNT_WINDOW", 0, 0, 1_000_000),
    )

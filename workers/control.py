"""Asking the broker about the workers (`outcomes status`): who answers a Celery ping, and how
many messages wait in the queue. Both through the broker only, each under a short timeout, so
a status screen never hangs on a broker that is away."""

from __future__ import annotations

from contextlib import suppress
from dataclasses import dataclass, field
from typing import Any

from ledger.settings import load_settings
from workers.app import make_celery

CONNECT_TIMEOUT_S = 2.0


@dataclass(frozen=True)
class BrokerStatus:
    reachable: bool
    workers: list[str] = field(default_factory=list)  # node names that answered the ping
    queue: str = ""
    queue_depth: int | None = None  # None: unknown (no broker, or it would not say)
    error: str | None = None

    def to_json(self) -> dict[str, object]:
        return {
            "reachable": self.reachable,
            "workers": self.workers,
            "queue": self.queue,
            "queue_depth": self.queue_depth,
            "error": self.error,
        }


def broker_status(ping_timeout_s: float = 1.0) -> BrokerStatus:
    settings = load_settings()
    app = make_celery(settings)
    try:
        with app.connection_for_read() as conn:
            try:
                conn.ensure_connection(max_retries=1, timeout=CONNECT_TIMEOUT_S)
            except Exception as exc:  # any transport's failure means the same here: not reachable
                return BrokerStatus(False, queue=settings.queue, error=_reason(exc))
            depth = _depth(conn, settings.queue)
        replies = app.control.ping(timeout=ping_timeout_s)
        nodes = sorted(node for reply in replies for node in reply)
        return BrokerStatus(True, nodes, settings.queue, depth)
    finally:
        app.close()


def _depth(conn: Any, queue: str) -> int | None:
    """Messages ready in the queue (a passive declare creates nothing); None when unknown."""
    channel = conn.channel()
    try:
        declared = channel.queue_declare(queue=queue, passive=True)
    except conn.channel_errors as exc:
        # RabbitMQ and kombu's virtual transports (Redis drops an emptied queue's key) both say
        # NOT_FOUND for a queue that holds nothing yet.
        return 0 if "NOT_FOUND" in str(exc) else None
    finally:
        with suppress(Exception):  # a refused declare may already have closed it
            channel.close()
    return int(declared.message_count)


def _reason(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}".splitlines()[0]

"""The baselines' Celery app for bench.throughput: one `noop` task, configured like ours.

A worker runs it with `celery -A bench.throughput_tasks worker ...`; the module-level `app`
reads its broker, result backend and counter file from the environment (THROUGHPUT_*). The
benchmark's producer builds its own app with `make_app(...)`, with the same settings.

Settings shared with `workers.app.make_celery` (the ledger's app): JSON, late acks, reject on
worker lost, the same prefetch multiplier (OUTCOMES_PREFETCH, default 4), the same publish retry
policy, no task events, no rate limits. The only difference between the two baselines is the
result backend: none (`task_ignore_result`), or Celery's database backend.

How the bare baseline knows a task ran: the task appends one byte to a counter file (open with
O_APPEND, write 1 byte, close: a few microseconds, small next to a Celery task's own overhead,
and atomic between processes). The producer polls the file's size. That is the cheapest
completion signal visible across processes that needs no extra service, so it favours the
baseline. The result-backend baseline needs no counter: the rows Celery stores are the signal.
"""

from __future__ import annotations

import os
from typing import Any

from celery import Celery

NOOP_TASK = "throughput.noop"
BROKER_ENV = "THROUGHPUT_BROKER_URL"
BACKEND_ENV = "THROUGHPUT_RESULT_BACKEND"  # unset or empty: no result backend
COUNTER_ENV = "THROUGHPUT_COUNTER_FILE"  # unset or empty: no counter
QUEUE_ENV = "THROUGHPUT_QUEUE"

_COUNTER = os.environ.get(COUNTER_ENV) or None


def noop(seq: int) -> None:
    """The no-op task: count itself in the counter file, if there is one."""
    if _COUNTER is not None:
        fd = os.open(_COUNTER, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            os.write(fd, b"x")
        finally:
            os.close(fd)


def make_app(broker: str, queue: str, result_backend: str | None = None) -> Celery:
    app = Celery("throughput", broker=broker, set_as_current=False)
    conf: dict[str, Any] = {
        "broker_connection_retry_on_startup": True,
        "result_backend": result_backend,
        "result_expires": 3600,  # the benchmarks' results need not outlive them by a day
        "task_ignore_result": result_backend is None,
        "task_store_errors_even_if_ignored": False,
        "task_acks_late": True,
        "task_reject_on_worker_lost": True,
        "task_default_queue": queue,
        "task_routes": {NOOP_TASK: {"queue": queue}},
        "task_serializer": "json",
        "result_serializer": "json",
        "accept_content": ["json"],
        "task_publish_retry": True,
        "task_publish_retry_policy": {
            "max_retries": 2,
            "interval_start": 0,
            "interval_step": 0.2,
            "interval_max": 0.5,
        },
        "worker_prefetch_multiplier": int(os.environ.get("OUTCOMES_PREFETCH", 4)),
        "worker_hijack_root_logger": False,
        "worker_send_task_events": False,
        "task_send_sent_event": False,
        "worker_disable_rate_limits": True,
    }
    app.conf.update(conf)
    app.task(name=NOOP_TASK, acks_late=True)(noop)
    return app


app: Celery = make_app(
    os.environ.get(BROKER_ENV) or "amqp://guest:guest@127.0.0.1:5672//",
    os.environ.get(QUEUE_ENV) or "throughput",
    os.environ.get(BACKEND_ENV) or None,
)

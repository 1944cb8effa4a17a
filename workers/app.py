"""The Celery app: broker from OUTCOMES_BROKER_URL, no result backend (the ledger is the
result store), late acks, and a prefetch that suits short tasks."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from celery import Celery

from ledger.services.reconcile import INTERVAL_S as RECONCILE_INTERVAL_S
from ledger.settings import DEFAULT_HOME, Settings, load_settings
from ledger.tools import load_tool_modules
from workers.embedded_broker import BELLS, SCHEME

EXECUTE_TASK = "outcomes.execute"
RECONCILE_TASK = "outcomes.reconcile"


def embedded_broker(home: Path = DEFAULT_HOME) -> tuple[str, dict[str, Any]]:
    """A queue in a folder, no server, shared by processes (`workers.embedded_broker`)."""
    queue_dir = (home / "broker" / "queue").resolve()
    processed = (home / "broker" / "processed").resolve()
    control = (home / "broker" / "control").resolve()  # kombu's default is ./control
    bells = (home / "broker" / "bells").resolve()  # consumers' wake-ups (embedded_broker)
    home.mkdir(mode=0o700, parents=True, exist_ok=True)  # the ledger's folder too: private
    for folder in (queue_dir, processed, control):
        folder.mkdir(parents=True, exist_ok=True)
    options = {
        "data_folder_in": str(queue_dir),
        "data_folder_out": str(queue_dir),
        "processed_folder": str(processed),
        "store_processed": False,
        "control_folder": str(control),
        "polling_interval": 0.05,  # where bells do not work (not Linux)
        BELLS: str(bells),
    }
    return f"{SCHEME}://", options


def broker_settings(settings: Settings) -> tuple[str, dict[str, Any]]:
    if settings.broker_url is None:
        return embedded_broker()
    options: dict[str, Any] = {}
    if settings.broker_url.startswith(("redis://", "rediss://")):
        # Redis redelivers unacked work after this; the ledger's claim makes that harmless.
        options["visibility_timeout"] = settings.redis_visibility_s
    return settings.broker_url, options


def make_celery(settings: Settings | None = None) -> Celery:
    settings = settings or load_settings()
    broker, transport_options = broker_settings(settings)
    app = Celery("outcomes", broker=broker, set_as_current=False)
    app.conf.update(
        broker_transport_options=transport_options,
        broker_connection_retry_on_startup=True,
        result_backend=None,
        task_ignore_result=True,
        task_store_errors_even_if_ignored=False,
        task_acks_late=True,
        # A killed worker's message goes back to the queue; the claim stops a second run.
        task_reject_on_worker_lost=True,
        task_default_queue=settings.queue,
        task_routes={
            EXECUTE_TASK: {"queue": settings.queue},
            RECONCILE_TASK: {"queue": settings.queue},
        },
        # Used only where `celery beat` runs (the `outcomes reconcile` service is the other way).
        beat_schedule={
            "reconcile": {"task": RECONCILE_TASK, "schedule": RECONCILE_INTERVAL_S},
        },
        task_serializer="json",
        accept_content=["json"],
        task_publish_retry=True,
        task_publish_retry_policy={
            "max_retries": 2,
            "interval_start": 0,
            "interval_step": 0.2,
            "interval_max": 0.5,
        },
        worker_prefetch_multiplier=settings.prefetch,
        # Celery's "reduce the prefetch after a reconnect, restore it as tasks complete" chains
        # its restoring `basic.qos` onto each ack; the batched runner acks from threads of its
        # own, so that call ran off the event loop (not thread-safe), and a connection lost at
        # that moment killed the runner's claims thread (a nemesis campaign stalled on it). The
        # reduction only guards against over-fetching, which the prefetch limit bounds anyway.
        worker_enable_prefetch_count_reduction=False,
        worker_hijack_root_logger=False,
        # Flower and `celery events` read these; off by default (a message per task state).
        worker_send_task_events=settings.task_events,
        task_send_sent_event=settings.task_events,
        worker_disable_rate_limits=True,
        # Remote control on, so `celery -A workers.main inspect|control` and Flower work: each
        # worker has a unique node name (`outcomes-PID@host`, workers/main.py), hence its own
        # pidbox queue. The exchanges are named after the queue, so deployments sharing a
        # broker neither answer nor hear each other.
        worker_enable_remote_control=True,
        control_exchange=settings.queue,
        event_exchange=f"{settings.queue}.events",
    )
    load_tool_modules(settings.tools)
    app.autodiscover_tasks(["workers"], related_name="tasks", force=True)
    app.autodiscover_tasks(["workers"], related_name="beat", force=True)
    return app

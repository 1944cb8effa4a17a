"""The dispatch port (`ledger.dispatch.Dispatcher`) on Celery: hands job ids to the broker
(only the id: arguments and secrets stay in the ledger).

A job to run now is published with kombu directly: a Celery protocol-2 message with the few
headers a worker reads (`task`, `id`, `root_id`, `lang`), to the queue's own exchange. Celery's
`send_task` builds and serializes some twenty headers per message, which cost the sending
process more than its decision (bench.throughput's sender CPU). A delayed job (a retry's
backoff) goes through `send_task`, which knows how to say when.
"""

from __future__ import annotations

import threading
import uuid
from typing import Any

from celery import Celery
from kombu.exceptions import KombuError, OperationalError

from ledger.errors import DispatchError
from workers.app import EXECUTE_TASK

# Protocol 2's "embed": no callbacks, errbacks, chain or chord.
_EMBED = {"callbacks": None, "errbacks": None, "chain": None, "chord": None}


class CeleryDispatcher:
    def __init__(self, app: Celery, queue: str) -> None:
        self.app = app
        self.queue = queue
        self._declared = threading.Event()  # the queue exists once a publish declared it

    def dispatch(self, job_id: str, delay_s: float = 0.0) -> None:
        try:
            if delay_s > 0:
                self.app.send_task(EXECUTE_TASK, args=[job_id], queue=self.queue, countdown=delay_s)
            else:
                self._publish(job_id)
        except (KombuError, OperationalError, OSError) as exc:
            raise DispatchError(f"broker refused job {job_id}: {type(exc).__name__}") from exc

    def _publish(self, job_id: str) -> None:
        task_id = str(uuid.uuid4())
        queue = self.app.amqp.queues[self.queue]
        headers: dict[str, Any] = {"lang": "py", "task": EXECUTE_TASK, "id": task_id}
        headers["root_id"] = task_id
        with self.app.producer_or_acquire() as producer:
            producer.publish(
                [[job_id], {}, _EMBED],
                exchange=queue.exchange,
                routing_key=queue.routing_key,
                serializer="json",
                headers=headers,
                correlation_id=task_id,
                delivery_mode=2,
                declare=[] if self._declared.is_set() else [queue],
                retry=True,
                retry_policy=self.app.conf.task_publish_retry_policy,
            )
        self._declared.set()


def dispatcher_from_settings() -> CeleryDispatcher:
    """The dispatcher the API, the reconciler and the CLI use (one Celery app per process)."""
    from ledger.settings import load_settings
    from workers.app import make_celery

    settings = load_settings()
    return CeleryDispatcher(make_celery(settings), settings.queue)

"""The dispatch port (`ledger.dispatch.Dispatcher`) on Celery: hands job ids to the broker
(only the id: arguments and secrets stay in the ledger).

A job to run now is published with kombu directly: a Celery protocol-2 message with the few
headers a worker reads (`task`, `id`, `root_id`, `lang`), to the queue's own exchange. Celery's
`send_task` builds and serializes some twenty headers per message, which cost the sending
process more than its decision (bench.throughput's sender CPU). A delayed job (a retry's
backoff) goes through `send_task`, which knows how to say when.

The producers are kept, one broker connection each, and lent to one dispatching thread at a
time: borrowing one from Celery's producer pool (which hands the connection back to its own
pool at each release and revives the channel at each acquire) cost more than the publish.
"""

from __future__ import annotations

import os
import threading
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from celery import Celery
from kombu.exceptions import KombuError, OperationalError
from kombu.messaging import Producer

from ledger.errors import DispatchError
from workers.app import EXECUTE_TASK

# Protocol 2's "embed": no callbacks, errbacks, chain or chord.
_EMBED = {"callbacks": None, "errbacks": None, "chain": None, "chord": None}


class KeptProducers:
    """Producers on connections of their own, kept between publishes and lent to one thread
    at a time (at most as many as threads ever published at once). One whose publish failed
    is closed, never lent again: the next publish opens a fresh connection. A forked child
    never uses its parent's (their sockets are shared with the parent)."""

    def __init__(self, app: Celery) -> None:
        self._app = app
        self._lock = threading.Lock()
        self._idle: list[Producer] = []
        self._pid = os.getpid()

    @contextmanager
    def lent(self) -> Iterator[Producer]:
        with self._lock:
            if self._pid != os.getpid():
                self._idle, self._pid = [], os.getpid()
            producer = self._idle.pop() if self._idle else None
        if producer is None:
            connection = self._app.connection_for_write()
            try:
                producer = Producer(connection, auto_declare=False)  # type: ignore[no-untyped-call]
            except BaseException:
                connection.release()
                raise
        try:
            yield producer
        except BaseException:
            producer.connection.release()
            raise
        with self._lock:
            self._idle.append(producer)

    def close(self) -> None:
        with self._lock:
            idle, self._idle = self._idle, []
        for producer in idle:
            producer.connection.release()


class CeleryDispatcher:
    def __init__(self, app: Celery, queue: str) -> None:
        self.app = app
        self.queue = queue
        self._declared = threading.Event()  # the queue exists once a publish declared it
        self.producers = KeptProducers(app)

    def close(self) -> None:
        """Close the kept producers' connections (the app's own pools are `app.close()`'s)."""
        self.producers.close()

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
        with self.producers.lent() as producer:
            producer.publish(  # type: ignore[no-untyped-call]
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

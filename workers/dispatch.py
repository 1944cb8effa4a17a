"""The dispatch port (`ledger.dispatch`) on Celery: hands job ids to the broker (only the id:
arguments and secrets stay in the ledger), and returns only once the broker has confirmed them.

A message is a Celery protocol-2 message with the few headers a worker reads (`task`, `id`,
`root_id`, `lang`, and `eta` for a retry's backoff) and the two that monitors show
(`argsrepr`, `kwargsrepr`), published with kombu to the queue's own exchange: Celery's
`send_task` builds and serializes some twenty headers per message, which cost the sending
process more than its decision (bench.throughput's sender CPU).

The task id (`id`) is the job id, so Flower and `celery events` show each job under its own id;
every message of a job (a retry's, the reconciler's relay or re-dispatch, a duplicate) carries
the same one, which is harmless: a worker's claim is version-checked, not keyed by message. The
message's `correlation_id` stays unique to each publish: the broker's confirms and returns are
matched by it (workers/confirms.py). `kwargsrepr` names the tool (`{'tool': 'tracker.read_issue'}`)
and `argsrepr` the job id: never an argument value (those may be secret, and stay in the ledger).

Confirmed means: on RabbitMQ, the broker's publisher confirm (`basic.ack`, after a persistent
message reached the durable queue's disk), with `mandatory` set so that a message no queue
takes comes back as a failure instead of vanishing; the confirms of a batch are awaited
together. On Redis, the command's reply; on the embedded broker, the message file written whole.

The producers are kept, one broker connection each, and lent to one dispatching thread at a
time: borrowing one from Celery's producer pool (which hands the connection back to its own
pool at each release and revives the channel at each acquire) cost more than the publish.

The queue marker (`workers.queue_marker`) tells whether the queue is still the one the ledger's
confirmed messages went to.
"""

from __future__ import annotations

import os
import threading
import time
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from typing import Any

from celery import Celery
from kombu.exceptions import KombuError, OperationalError
from kombu.messaging import Producer

from ledger.dispatch import Message
from ledger.errors import DispatchError
from ledger.settings import Settings
from workers.app import EXECUTE_TASK
from workers.confirms import BROKER_ERRORS, NO_QUEUE, Confirms
from workers.queue_marker import QueueMarkers

# Protocol 2's "embed": no callbacks, errbacks, chain or chord.
_EMBED = {"callbacks": None, "errbacks": None, "chain": None, "chord": None}
CONFIRM_TIMEOUT_S = 10.0  # a broker that confirms nothing in this long has not taken the batch
CONNECT_TIMEOUT_S = 3.0
_PUBLISH_ERRORS: tuple[type[BaseException], ...] = (
    KombuError,
    OperationalError,
    OSError,
    *BROKER_ERRORS,
)


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
                # One quick attempt: the outbox retries, so a broker that is away must not hold
                # the publishing thread in kombu's reconnect loop.
                connection.ensure_connection(
                    max_retries=1, interval_start=0, interval_step=0, timeout=CONNECT_TIMEOUT_S
                )
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


class _Unconfirmed(Exception):
    """The broker did not confirm all of a batch: the producer must not be lent again."""

    def __init__(self, fates: list[DispatchError | None]) -> None:
        super().__init__("unconfirmed")
        self.fates = fates


class CeleryDispatcher:
    def __init__(self, app: Celery, queue: str) -> None:
        self.app = app
        self.queue = queue
        self._declared = threading.Event()  # the queue exists once a publish declared it
        self.producers = KeptProducers(app)
        self._markers = QueueMarkers(app, queue)
        self._errors: tuple[type[BaseException], ...] | None = None

    def close(self) -> None:
        """Close the kept producers' connections (the app's own pools are `app.close()`'s)."""
        self.producers.close()

    def dispatch(self, job_id: str, delay_s: float = 0.0) -> None:
        failed = self.dispatch_many([Message(job_id, delay_s)])[0]
        if failed is not None:
            raise failed

    def dispatch_many(self, messages: Sequence[Message]) -> list[DispatchError | None]:
        if not messages:
            return []
        try:
            with self.producers.lent() as producer:
                return self._publish_all(producer, messages)
        except _Unconfirmed as unconfirmed:
            return unconfirmed.fates
        except self._broker_errors() as exc:
            self._declared.clear()  # a new connection declares the queue again
            why = f"broker unavailable: {type(exc).__name__}: {exc}"
            return [DispatchError(f"job {m.job_id} not dispatched ({why})") for m in messages]

    def _broker_errors(self) -> tuple[type[BaseException], ...]:
        """What a publish raises when the broker or the connection fails: kombu's and the
        transport's own (redis-py's ConnectionError is no OSError)."""
        if self._errors is None:
            conn = self.app.connection_for_write()
            try:
                self._errors = (*_PUBLISH_ERRORS, *conn.connection_errors, *conn.channel_errors)
            finally:
                conn.release()
        return self._errors

    # --- marker (ledger.dispatch.QueueMarker) ---------------------------------------------

    def marker_present(self, epoch: str) -> bool | None:
        return self._markers.present(epoch)

    def place_marker(self, epoch: str) -> None:
        self._markers.place(epoch)
        self._declared.clear()

    # --- publishing -----------------------------------------------------------------------

    def _publish_all(
        self, producer: Producer, messages: Sequence[Message]
    ) -> list[DispatchError | None]:
        queue = self.app.amqp.queues[self.queue]
        confirms = Confirms.of(producer) if _is_amqp(producer) else None
        if not self._declared.is_set():
            # Declared outright, not through kombu's per-connection cache of what it declared
            # once: a queue deleted since must be declared again.
            queue(producer.channel).declare()
            self._declared.set()
        sent: list[str] = []
        for message in messages:
            publish_id = str(uuid.uuid4())  # this publish's own: a job's messages share its id
            if confirms is not None:
                confirms.expect(publish_id)
            producer.publish(  # type: ignore[no-untyped-call]
                [[message.job_id], {}, _EMBED],
                exchange=queue.exchange,
                routing_key=queue.routing_key,
                serializer="json",
                headers=_headers(message),
                correlation_id=publish_id,
                delivery_mode=2,
                mandatory=confirms is not None,
                retry=False,
            )
            sent.append(publish_id)
        if confirms is None:
            return [None] * len(messages)  # the transport's reply was the confirmation
        refused = confirms.wait(sent, time.monotonic() + CONFIRM_TIMEOUT_S)
        fates: list[DispatchError | None] = [
            None if why is None else DispatchError(f"job {m.job_id} not dispatched: {why}")
            for m, why in zip(messages, refused, strict=True)
        ]
        if confirms.broken:
            raise _Unconfirmed(fates)
        if any(why is not None and why.startswith(NO_QUEUE) for why in refused):
            self._declared.clear()  # the queue is gone: the next publish declares it again
        return fates


def _is_amqp(producer: Producer) -> bool:
    return bool(producer.connection.transport.driver_type == "amqp")


def _headers(message: Message) -> dict[str, Any]:
    job_id = message.job_id
    headers: dict[str, Any] = {"lang": "py", "task": EXECUTE_TASK, "id": job_id}
    headers["root_id"] = job_id
    headers["argsrepr"] = repr([job_id])
    headers["kwargsrepr"] = repr({"tool": message.tool}) if message.tool else "{}"
    if message.delay_s > 0:
        eta = datetime.now(UTC) + timedelta(seconds=message.delay_s)
        headers["eta"] = eta.isoformat()
    return headers


def dispatcher_from_settings(settings: Settings | None = None) -> CeleryDispatcher:
    """The dispatcher the API, the reconciler and the CLI use (one Celery app per process),
    from the process's settings (read now when not given)."""
    from ledger.settings import load_settings
    from workers.app import make_celery

    settings = settings or load_settings()
    return CeleryDispatcher(make_celery(settings), settings.queue)

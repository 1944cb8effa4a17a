"""A queue's epoch marker: a mark the broker keeps exactly as long as the queue itself.

The ledger trusts a confirmed message: it is in the queue until a worker takes it, however
long that takes. The one thing that makes such a message gone is the queue itself going —
deleted (and perhaps re-created by a worker's declare), or wiped with the broker's data (a
Redis that keeps nothing, restarted). The marker tells: the reconciler places one for an
epoch the ledger records, and asks for it on every pass; when it is gone, every message
confirmed under that epoch may be gone with it, and those jobs are sent again, with that
evidence recorded (`ledger.runtime.queue_epoch`).

- RabbitMQ: a durable fanout exchange named after the queue and the epoch, bound to the queue
  and to nothing else, through which nothing is ever published. A queue that is deleted takes
  its bindings with it. Asking is `exchange.delete` with `if-unused`: the broker refuses while
  the binding holds (the queue is there), and deletes an exchange left with no binding (the
  queue went). A broker restart keeps a durable queue, its exchange and the binding.
- Redis: a key beside the queue's list, holding the epoch; a restart that kept nothing, or a
  FLUSHALL, takes it with the messages.
- The embedded broker: a file in the queue's folder, holding the epoch.

What no marker shows: a queue purged (its messages removed, the queue and its bindings kept).
docs/reliability.md says so.
"""

from __future__ import annotations

import contextlib
import logging
import os
from typing import Any

import amqp.exceptions
from celery import Celery
from kombu.entity import Exchange
from kombu.exceptions import KombuError

from ledger.errors import DispatchError
from workers.confirms import BROKER_ERRORS

CONNECT_TIMEOUT_S = 3.0
log = logging.getLogger(__name__)


def marker_exchange(queue: str, epoch: str) -> str:
    return f"{queue}.epoch.{epoch}"


def redis_key(queue: str) -> str:
    return f"_outcomes.epoch.{queue}"


class QueueMarkers:
    def __init__(self, app: Celery, queue: str) -> None:
        self.app = app
        self.queue = queue

    def present(self, epoch: str) -> bool | None:
        conn = self.app.connection_for_write()
        errors = (
            *conn.connection_errors,
            *conn.channel_errors,
            *BROKER_ERRORS,
            KombuError,  # kombu's OperationalError, for a connection that could not be made
            OSError,
        )
        try:
            conn.ensure_connection(
                max_retries=1, interval_start=0, interval_step=0, timeout=CONNECT_TIMEOUT_S
            )
            kind = conn.transport.driver_type
            if kind == "amqp":
                return self._amqp_present(conn, epoch)
            if kind == "redis":
                value = conn.default_channel.client.get(redis_key(self.queue))
                return value is not None and value.decode() == epoch
            return _read(self._marker_file(conn)) == epoch
        except errors as exc:
            log.info("queue %s: its marker cannot be read now (%s)", self.queue, exc)
            return None  # no evidence either way
        finally:
            conn.release()

    def place(self, epoch: str) -> None:
        try:
            with self.app.connection_for_write() as conn:
                conn.ensure_connection(
                    max_retries=1, interval_start=0, interval_step=0, timeout=CONNECT_TIMEOUT_S
                )
                channel = conn.channel()
                try:
                    self.app.amqp.queues[self.queue](channel).declare()
                    kind = conn.transport.driver_type
                    if kind == "amqp":
                        self._amqp_place(channel, epoch)
                    elif kind == "redis":
                        conn.default_channel.client.set(redis_key(self.queue), epoch)
                    else:
                        _write_whole(self._marker_file(conn), epoch)
                finally:
                    channel.close()
        except Exception as exc:
            raise DispatchError(f"could not mark queue {self.queue!r}: {exc}") from exc

    def _amqp_present(self, conn: Any, epoch: str) -> bool:
        channel = conn.channel()  # the broker closes it when it refuses: it is ours alone
        try:
            channel.exchange_delete(marker_exchange(self.queue, epoch), if_unused=True)
        except amqp.exceptions.PreconditionFailed:
            return True  # in use: the queue still holds the binding
        except amqp.exceptions.NotFound:
            return False
        else:
            return False  # no binding was left: the queue it was bound to is gone
        finally:
            with contextlib.suppress(Exception):  # already closed by the broker's refusal
                channel.close()

    def _amqp_place(self, channel: Any, epoch: str) -> None:
        name = marker_exchange(self.queue, epoch)
        marker = Exchange(name, type="fanout", durable=True, auto_delete=False)  # type: ignore[no-untyped-call]
        marker(channel).declare()  # type: ignore[no-untyped-call]
        channel.queue_bind(queue=self.queue, exchange=name, routing_key="")

    def _marker_file(self, conn: Any) -> str:
        folder = (conn.transport_options or {}).get("data_folder_in") or "."
        return os.path.join(str(folder), f".epoch.{self.queue}")


def _read(path: str) -> str | None:
    try:
        with open(path, encoding="utf-8") as found:
            return found.read().strip()
    except FileNotFoundError:
        return None


def _write_whole(path: str, text: str) -> None:
    partial = f"{path}.{os.getpid()}.part"
    with open(partial, "w", encoding="utf-8") as out:
        out.write(text)
    os.replace(partial, path)

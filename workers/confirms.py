"""RabbitMQ publisher confirms for a batch, on one channel.

The channel is put in confirm mode once; from then on the broker numbers every message
published on it (delivery tags 1, 2, …) and answers each with `basic.ack` (taken: a
persistent message is on the durable queue's disk) or `basic.nack` (refused). A message
published with `mandatory` that no queue takes comes back first as `basic.return` (NO_ROUTE),
then is acked: it counts as refused. The batch is published whole, then its confirms are read
together, so a batch costs one wait for the broker's disk, not one per message.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Sequence
from typing import Any

import amqp.exceptions

# What a publish or a wait for confirms may raise when the broker or the connection fails.
BROKER_ERRORS: tuple[type[BaseException], ...] = (
    amqp.exceptions.AMQPError,
    ConnectionError,
    socket.error,
)
NO_QUEUE = "no queue took it"


class Confirms:
    """The confirm state of one AMQP channel (kept on it: a channel's tags never restart)."""

    def __init__(self, channel: Any) -> None:
        self._channel = channel
        channel.confirm_select()
        self._next_tag = 1
        # Messages are known by their publish's id, the message's `correlation_id` (unique to
        # each publish: a job's messages share their task id, the job id).
        self._waiting: dict[int, str] = {}  # delivery tag -> publish id, in publishing order
        self._returned: dict[str, str] = {}  # publish id -> why the broker gave it back
        self._fates: dict[str, str | None] = {}  # publish id -> None (confirmed) or why not
        self.broken = False  # confirms went missing: tags can no longer be trusted
        channel.events["basic_ack"].add(self._on_ack)
        channel.events["basic_nack"].add(self._on_nack)
        channel.events["basic_return"].add(self._on_return)

    @classmethod
    def of(cls, producer: Any) -> Confirms:
        channel = producer.channel
        found = getattr(channel, "_outcomes_confirms", None)
        if found is None:
            found = cls(channel)
            channel._outcomes_confirms = found
        assert isinstance(found, Confirms)
        return found

    def expect(self, publish_id: str) -> None:
        """The next publish on this channel carries `publish_id` (its `correlation_id`)."""
        self._waiting[self._next_tag] = publish_id
        self._next_tag += 1

    def wait(self, publish_ids: Sequence[str], deadline: float) -> list[str | None]:
        """Each message's fate (None: confirmed), reading the broker's answers until all came
        or the deadline (monotonic) passed: then the rest are not confirmed, and the channel
        is `broken` (a late ack would be taken for another message's)."""
        connection = self._channel.connection
        while any(publish not in self._fates for publish in publish_ids):
            left = deadline - time.monotonic()
            if left <= 0:
                self.broken = True
                break
            try:
                connection.drain_events(timeout=min(left, 1.0))
            except TimeoutError:
                continue
        late = "the broker did not confirm it in time"
        return [self._fates.pop(publish, late) for publish in publish_ids]

    def _settle(self, tag: int, multiple: bool, refused: str | None) -> None:
        tags = [t for t in self._waiting if t <= tag] if multiple else [tag]
        for settled in tags:
            publish = self._waiting.pop(settled, None)
            if publish is not None:
                returned = self._returned.pop(publish, None)
                self._fates[publish] = refused or returned

    def _on_ack(self, tag: int, multiple: bool) -> None:
        self._settle(tag, multiple, None)

    def _on_nack(self, tag: int, multiple: bool) -> None:
        self._settle(tag, multiple, "the broker refused it (basic.nack)")

    def _on_return(self, exc: Exception, exchange: str, routing_key: str, message: Any) -> None:
        publish = (getattr(message, "properties", None) or {}).get("correlation_id")
        if publish is not None:
            self._returned[str(publish)] = f"{NO_QUEUE} ({exc})"

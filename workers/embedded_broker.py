"""The embedded broker: kombu's filesystem transport (a queue in a folder, shared by the
processes of one machine, no server), with one change: a message is written under a name no
consumer reads and then renamed into the queue. kombu's own transport creates the message file
under its final name before writing it, so a consumer polling at that moment can take an empty
or half-written file, fail to decode it and lose the job (the reconciler would re-dispatch it,
but only after the dispatch deadline).

The same holds for an exchange's table of bound queues: kombu creates the table file empty and
then writes it, so a process publishing (or binding) at that moment read an empty file and
failed. Here a table is written whole under another name and renamed into place, writers taking
turns on a lock file of their own; a table that still cannot be read is a typed broker error
(the job stays recorded and the reconciler dispatches it), never a crash. And within a process,
a bind is whole before another thread sees it: kombu marks a binding as known before it writes
the table, so a second thread publishing at that moment found no queue bound and kombu dropped
its message into a queue nobody reads.

And a consumer is woken, not left to poll: with a `bells_folder` in the transport options, a
message put rings the bells there (`ledger.doorbell`) and a consumer with nothing to take
waits on its own bell, polling the folder only every BELL_POLL_S as a safety net (kombu's
transport polls every `polling_interval`, 0.05 s here, which was most of an idle worker's CPU
and, on average, 25 ms of every job's wait)."""

from __future__ import annotations

import os
import threading
import uuid
from pathlib import Path
from queue import Empty
from time import monotonic
from typing import Any

import orjson
from kombu.exceptions import ChannelError
from kombu.transport import TRANSPORT_ALIASES, filesystem

from ledger import doorbell
from ledger.doorbell import Bell

SCHEME = "outcomes-fs"
BELLS = "bells_folder"  # transport option: where consumers' bells are
BELL_POLL_S = 1.0  # a consumer with a bell still looks this often (a ring is only a hint)

_BINDING = threading.Lock()  # kombu's bindings are process-wide state, shared by channels


class Channel(filesystem.Channel):
    def _put(self, queue: Any, payload: Any, **kwargs: Any) -> Any:  # type: ignore[override]
        name = f"{round(monotonic() * 1000)}_{uuid.uuid4()}.{queue}.msg"
        final = os.path.join(self.data_folder_out, name)
        # "<…>.<queue>.msg.part": no consumer's suffix
        _write_whole(final, f"{final}.part", orjson.dumps(payload))
        doorbell.ring(bells_folder(self.transport_options))

    def queue_bind(self, *args: Any, **kwargs: Any) -> None:
        with _BINDING:
            super().queue_bind(*args, **kwargs)  # type: ignore[no-untyped-call]

    def get_table(self, exchange: Any) -> Any:
        try:
            return super().get_table(exchange)  # type: ignore[no-untyped-call]
        except ValueError as exc:  # a table no writer of ours leaves: say so, typed
            raise ChannelError(f"unreadable table of exchange {exchange!r}") from exc

    def _queue_bind(self, exchange: Any, routing_key: Any, pattern: Any, queue: Any) -> None:
        file = self._exchange_file(exchange)  # type: ignore[no-untyped-call]
        self.control_folder.mkdir(exist_ok=True)
        entry = filesystem.exchange_queue_t(routing_key or "", pattern or "", queue or "")
        try:
            with open(f"{file}.lock", "ab") as guard:
                # Released when closed; writers take turns, readers see whole files anyway.
                filesystem.lock(guard, filesystem.LOCK_EX)  # type: ignore[no-untyped-call]
                table = list(self.get_table(exchange))
                if entry in table:
                    return
                rows = orjson.dumps([list(e) for e in (entry, *table)])
                _write_whole(str(file), f"{file}.{uuid.uuid4().hex}.part", rows)
        except OSError as exc:
            raise ChannelError(f"cannot bind {queue!r} to {exchange!r}: {exc}") from exc


def _write_whole(final: str, partial: str, data: bytes) -> None:
    """Write under `partial`, then rename to `final`: readers see all of it or none."""
    with open(partial, "wb") as out:
        out.write(data)
    os.replace(partial, final)


def bells_folder(options: dict[str, Any]) -> Path | None:
    folder = options.get(BELLS)
    return Path(folder) if folder else None


class Transport(filesystem.Transport):
    Channel = Channel

    _bell: Bell | None = None
    _bell_tried = False

    def drain_events(self, connection: Any, timeout: Any = None, **kwargs: Any) -> Any:
        """kombu's loop, with the wait between two empty looks on the bell rather than a
        sleep; a consumer whose prefetch is full waits kombu's interval (an ack frees it, and
        rings nothing)."""
        bell, cycle = self._consumer_bell(), self.cycle
        if bell is None or cycle is None:
            super().drain_events(connection, timeout)  # type: ignore[no-untyped-call]
            return
        started = monotonic()
        while True:
            try:
                cycle.get(self._deliver, timeout=timeout)  # type: ignore[no-untyped-call]
                return
            except Empty:
                waited = monotonic() - started
                if timeout is not None and waited >= timeout:
                    raise TimeoutError() from None  # socket.timeout, as kombu raises
                pause = BELL_POLL_S if self._may_consume() else (self.polling_interval or 0.05)
                if timeout is not None:
                    pause = min(pause, timeout - waited)
                bell.wait(pause)

    def _consumer_bell(self) -> Bell | None:
        """Made by the first drain (only consumers drain), before its first look, so that no
        message put after that look goes unrung."""
        if not self._bell_tried:
            self._bell_tried = True
            options = self.client.transport_options if self.client is not None else {}
            self._bell = doorbell.listen(bells_folder(options))
        return self._bell

    def _may_consume(self) -> bool:
        return all(channel.qos.can_consume() for channel in self.channels if channel._consumers)

    def close_connection(self, connection: Any) -> None:
        super().close_connection(connection)  # type: ignore[no-untyped-call]
        if self._bell is not None:
            self._bell.close()
            self._bell = None


TRANSPORT_ALIASES.setdefault(SCHEME, f"{__name__}:Transport")

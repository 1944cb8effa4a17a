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
its message into a queue nobody reads."""

from __future__ import annotations

import os
import threading
import uuid
from time import monotonic
from typing import Any

import orjson
from kombu.exceptions import ChannelError
from kombu.transport import TRANSPORT_ALIASES, filesystem

SCHEME = "outcomes-fs"

_BINDING = threading.Lock()  # kombu's bindings are process-wide state, shared by channels


class Channel(filesystem.Channel):
    def _put(self, queue: Any, payload: Any, **kwargs: Any) -> Any:  # type: ignore[override]
        name = f"{round(monotonic() * 1000)}_{uuid.uuid4()}.{queue}.msg"
        final = os.path.join(self.data_folder_out, name)
        # "<…>.<queue>.msg.part": no consumer's suffix
        _write_whole(final, f"{final}.part", orjson.dumps(payload))

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


class Transport(filesystem.Transport):
    Channel = Channel


TRANSPORT_ALIASES.setdefault(SCHEME, f"{__name__}:Transport")

"""The embedded broker: kombu's filesystem transport (a queue in a folder, shared by the
processes of one machine, no server), with one change: a message is written under a name no
consumer reads and then renamed into the queue. kombu's own transport creates the message file
under its final name before writing it, so a consumer polling at that moment can take an empty
or half-written file, fail to decode it and lose the job (the reconciler would re-dispatch it,
but only after the dispatch deadline)."""

from __future__ import annotations

import os
import uuid
from time import monotonic
from typing import Any

import orjson
from kombu.transport import TRANSPORT_ALIASES, filesystem

SCHEME = "outcomes-fs"


class Channel(filesystem.Channel):
    def _put(self, queue: Any, payload: Any, **kwargs: Any) -> Any:  # type: ignore[override]
        name = f"{round(monotonic() * 1000)}_{uuid.uuid4()}.{queue}.msg"
        final = os.path.join(self.data_folder_out, name)
        partial = f"{final}.part"  # "<…>.<queue>.msg.part": no consumer's suffix
        with open(partial, "wb") as out:
            out.write(orjson.dumps(payload))
        os.replace(partial, final)  # atomic: consumers see the whole message or none


class Transport(filesystem.Transport):
    Channel = Channel


TRANSPORT_ALIASES.setdefault(SCHEME, f"{__name__}:Transport")

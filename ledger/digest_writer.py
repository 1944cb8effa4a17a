"""A digest written as it is read: the heads stream from the store to the file, none held.

The document is byte for byte what `Digest.dumps` makes of the same heads (so `Digest.loads`
reads it, its root included), but its `root` and `streams` come before the heads it covers:
the heads go to a spool file on the way (the root is hashed from them meanwhile), and the
document is written whole after them. Memory holds one head at a time.
"""

from __future__ import annotations

import hashlib
import shutil
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import IO, Any

import orjson

from ledger.clock import format_time
from ledger.digest import DIGEST_FORMAT
from ledger.errors import DigestError

_SPOOL_MEMORY = 64 << 10  # a small digest never touches the disk


@dataclass(frozen=True)
class DigestSummary:
    """What a written digest states, without its heads (what commands print about it)."""

    created_at: datetime
    position: int
    events: int
    streams: int
    root: str
    ledger_hash: str | None

    def to_json(self) -> dict[str, Any]:
        return {
            "created_at": format_time(self.created_at),
            "position": self.position,
            "events": self.events,
            "streams": self.streams,
            "root": self.root,
        }


def write_digest(
    out: IO[bytes],
    created_at: datetime,
    position: int,
    events: int,
    ledger_hash: str | None,
    heads: Iterable[tuple[str, int, str]],
) -> DigestSummary:
    """Write the digest of `heads` (stream id, version, hash), which must come in code-point
    order of stream ids (the order `Digest.root` hashes them in), to `out`."""
    when = format_time(created_at)
    # The root's canonical form is orjson's sorted-key JSON of what the digest states
    # (`Digest.root`): its keys in order are created_at, events, heads, ledger_hash, position.
    root = hashlib.sha256(b'{"created_at":' + orjson.dumps(when))
    root.update(b',"events":' + orjson.dumps(events) + b',"heads":{')
    streams = 0
    previous: str | None = None
    with tempfile.SpooledTemporaryFile(max_size=_SPOOL_MEMORY) as spool:
        for stream_id, version, hash_ in heads:
            if previous is not None and stream_id <= previous:
                raise DigestError(f"heads out of order at {stream_id!r}: the digest is not taken")
            previous = stream_id
            name, pair = orjson.dumps(stream_id), orjson.dumps([version, hash_])
            root.update((b"," if streams else b"") + name + b":" + pair)
            spool.write(
                (b",\n" if streams else b"")
                + b"    "
                + name
                + b": [\n      "
                + orjson.dumps(version)
                + b",\n      "
                + orjson.dumps(hash_)
                + b"\n    ]"
            )
            streams += 1
        if ledger_hash is not None:
            root.update(b'},"ledger_hash":' + orjson.dumps(ledger_hash))
        else:
            root.update(b"}")
        root.update(b',"position":' + orjson.dumps(position) + b"}")
        digest = root.hexdigest()
        summary = DigestSummary(created_at, position, events, streams, digest, ledger_hash)
        stated = {
            "format": DIGEST_FORMAT,
            "created_at": when,
            "position": position,
            "events": events,
            "streams": streams,
            "root": summary.root,
            "ledger_hash": ledger_hash,
        }
        header = orjson.dumps(stated, option=orjson.OPT_INDENT_2)
        out.write(header.removesuffix(b"\n}") + b',\n  "heads": ')
        if not streams:
            out.write(b"{}\n}")
            return summary
        out.write(b"{\n")
        spool.seek(0)
        shutil.copyfileobj(spool, out)
        out.write(b"\n  }\n}")
    return summary

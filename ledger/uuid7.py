"""Time-ordered identifiers (UUID version 7, RFC 9562 §5.7) for jobs, events and the other
records the ledger keys by id.

A random (version 4) id lands anywhere in a B-tree, so once an index outgrows the cache
every insert touches a page that is not in it, and writes slow as the ledger grows. A
version 7 id starts with the time in milliseconds: new ids land at the right edge of the
index, which stays in the cache whatever the ledger's size. The other 74 bits are random, so
ids stay unguessable; an id does tell when it was made (to the millisecond), which a job's
`created_at` says anyway.
"""

from __future__ import annotations

import os
import time
import uuid

_VERSION = 0x7 << 76
_VARIANT = 0b10 << 62


def uuid7(unix_ms: int | None = None) -> uuid.UUID:
    """A new version 7 UUID: 48 bits of Unix time in ms, then 74 random bits."""
    ms = time.time_ns() // 1_000_000 if unix_ms is None else unix_ms
    random = int.from_bytes(os.urandom(10), "big")  # 80 bits: 12 for rand_a, 62 for rand_b
    rand_a = random >> 68
    rand_b = random & ((1 << 62) - 1)
    value = ((ms & ((1 << 48) - 1)) << 80) | _VERSION | (rand_a << 64) | _VARIANT | rand_b
    return uuid.UUID(int=value)


def new_id() -> str:
    """A new id as text (the form the ledger stores and shows)."""
    return str(uuid7())


def unix_ms(value: uuid.UUID | str) -> int | None:
    """When a version 7 id was made (Unix time in ms); None for any other version."""
    found = value if isinstance(value, uuid.UUID) else uuid.UUID(value)
    return found.int >> 80 if found.version == 7 else None

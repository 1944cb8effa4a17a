"""Compact per-stream state for an archive's job streams, with no Python object a stream.

An archive takes up to millions of job streams. A set of their ids and a dict of their heads
(`(version, hash)` tuples of an int and a 64-character string) cost ~440 bytes a stream in
Python objects; here a stream costs its id's UTF-8 bytes and about 60 bytes of arrays:
`StreamSet` is an exact open-addressing set of stream ids (their bytes in one buffer, a slot
table of indexes, each id's hash), each stream numbered in the order added, and `HeadTable`
holds a head by that number (a version in an array, a SHA-256 hash as its 32 bytes). Only a
value that does not pack (a hash that is not 64 lowercase hex digits, a version beyond 64
bits: a file changed by hand) is kept as it is, on the side.
"""

from __future__ import annotations

from array import array
from collections.abc import Iterable

_EMPTY = 0  # a free slot; a used one holds its stream's number + 1


class StreamSet:
    """An exact set of stream ids, each numbered (0, 1, …) in the order added; `marks` holds
    one byte a stream for its user (the archive's writer: met yet)."""

    def __init__(self, streams: Iterable[str] = ()) -> None:
        self._ids = bytearray()
        self._ends = array("q")  # where each id's bytes end in _ids
        self._hashes = array("q")  # each id's hash(), to find it and to grow the table
        self._slots = array("q", [_EMPTY]) * 8
        self.marks = bytearray()
        for stream in streams:
            self.add(stream)

    def __len__(self) -> int:
        return len(self._ends)

    def __contains__(self, stream: object) -> bool:
        return isinstance(stream, str) and self.index(stream) >= 0

    def nbytes(self) -> int:
        """The bytes its arrays hold (their allocations may be up to twice as large)."""
        return (
            len(self._ids)
            + 8 * (len(self._ends) + len(self._hashes) + len(self._slots))
            + len(self.marks)
        )

    def index(self, stream: str) -> int:
        """The stream's number, or -1 when it is not in the set."""
        return self._find(stream, stream.encode(), hash(stream))[0]

    def add(self, stream: str) -> int:
        """The stream's number (a new one when it was not in the set yet)."""
        raw, key = stream.encode(), hash(stream)
        found, slot = self._find(stream, raw, key)
        if found >= 0:
            return found
        number = len(self._ends)
        self._ids += raw
        self._ends.append(len(self._ids))
        self._hashes.append(key)
        self.marks.append(0)
        self._slots[slot] = number + 1
        if 2 * len(self._ends) > len(self._slots):
            self._grow()
        return number

    def _find(self, stream: str, raw: bytes, key: int) -> tuple[int, int]:
        """(number or -1, the slot it is in or would go to)."""
        slots, mask = self._slots, len(self._slots) - 1
        slot = key & mask
        while True:
            used = slots[slot]
            if used == _EMPTY:
                return -1, slot
            number = used - 1
            if self._hashes[number] == key:
                start = self._ends[number - 1] if number else 0
                if self._ids[start : self._ends[number]] == raw:
                    return number, slot
            slot = (slot + 1) & mask

    def _grow(self) -> None:
        slots = array("q", [_EMPTY]) * (2 * len(self._slots))
        mask = len(slots) - 1
        for number, key in enumerate(self._hashes):
            slot = key & mask
            while slots[slot] != _EMPTY:
                slot = (slot + 1) & mask
            slots[slot] = number + 1
        self._slots = slots


_NONE, _PACKED, _ODD = 0, 1, 2  # a number's head: none yet, in the arrays, on the side
_HASH = 32


class HeadTable:
    """Each numbered stream's head so far, `(version, hash)` or None, in arrays."""

    def __init__(self) -> None:
        self._state = bytearray()
        self._versions = array("q")
        self._hashes = bytearray()
        self._odd: dict[int, tuple[int, str]] = {}

    def nbytes(self) -> int:
        return len(self._state) + 8 * len(self._versions) + len(self._hashes)

    @property
    def odd(self) -> int:
        """How many heads did not pack (kept as Python objects)."""
        return len(self._odd)

    def get(self, number: int) -> tuple[int, str] | None:
        if number >= len(self._state):
            return None
        state = self._state[number]
        if state == _PACKED:
            at = number * _HASH
            return self._versions[number], self._hashes[at : at + _HASH].hex()
        if state == _ODD:
            return self._odd[number]
        return None

    def set(self, number: int, version: int, hash_: str) -> None:
        if number >= len(self._state):
            more = number + 1 - len(self._state)
            self._state += bytes(more)
            self._versions.extend([0] * more)
            self._hashes += bytes(_HASH * more)
        packed = _packed(hash_)
        if packed is not None and -(2**63) <= version < 2**63:
            self._state[number] = _PACKED
            self._versions[number] = version
            at = number * _HASH
            self._hashes[at : at + _HASH] = packed
            self._odd.pop(number, None)
        else:
            self._state[number] = _ODD
            self._odd[number] = (version, hash_)


def _packed(hash_: str) -> bytes | None:
    """The hash's 32 bytes, when they give it back exactly (64 lowercase hex digits)."""
    if not isinstance(hash_, str) or len(hash_) != 2 * _HASH:
        return None
    try:
        raw = bytes.fromhex(hash_)
    except ValueError:
        return None
    return raw if raw.hex() == hash_ else None

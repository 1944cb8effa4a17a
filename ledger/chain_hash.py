"""The hash chains' hashing (contract §2): an event's canonical encoding and hash, its link
in the ledger-wide chain, and the rows a write stores (`ledger.chain` tells the chains)."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

import orjson

from ledger.clock import format_time
from ledger.errors import InvalidEventError
from ledger.events import NewEvent, RecordedEvent


def normalize_data(data: Mapping[str, Any]) -> dict[str, Any]:
    """JSON round trip: what is hashed is exactly what the database gives back."""
    try:
        encoded = orjson.dumps(data)
    except (TypeError, orjson.JSONEncodeError) as exc:
        raise InvalidEventError(f"event data is not JSON: {exc}") from None
    if b"\\u0000" in encoded:  # neither database stores NUL in text
        raise InvalidEventError("event data contains a NUL character")
    normal: dict[str, Any] = orjson.loads(encoded)
    return normal


def canonical_bytes(
    *,
    event_id: str,
    stream_id: str,
    stream_version: int,
    type: str,
    data: Mapping[str, Any],
    code: str | None,
    actor: str,
    recorded_at: datetime,
    prev_hash: str | None,
) -> bytes:
    """The bytes an event's `hash` is the SHA-256 of: its nine fields as one JSON object, keys
    sorted, no whitespace, UTF-8 (orjson), the time as `format_time` writes it."""
    return orjson.dumps(
        {
            "event_id": event_id,
            "stream_id": stream_id,
            "stream_version": stream_version,
            "type": type,
            "data": data,
            "code": code,
            "actor": actor,
            "recorded_at": format_time(recorded_at),
            "prev_hash": prev_hash,
        },
        option=orjson.OPT_SORT_KEYS,
    )


def event_hash(
    *,
    event_id: str,
    stream_id: str,
    stream_version: int,
    type: str,
    data: Mapping[str, Any],
    code: str | None,
    actor: str,
    recorded_at: datetime,
    prev_hash: str | None,
) -> str:
    canonical = canonical_bytes(
        event_id=event_id,
        stream_id=stream_id,
        stream_version=stream_version,
        type=type,
        data=data,
        code=code,
        actor=actor,
        recorded_at=recorded_at,
        prev_hash=prev_hash,
    )
    return hashlib.sha256(canonical).hexdigest()


def recorded_canonical_bytes(event: RecordedEvent) -> bytes:
    """A recorded event's canonical bytes, recomputed from its row as it reads now."""
    return canonical_bytes(
        event_id=str(event.event_id),
        stream_id=event.stream_id,
        stream_version=event.stream_version,
        type=event.type,
        data=event.data,
        code=event.code,
        actor=event.actor,
        recorded_at=event.recorded_at,
        prev_hash=event.prev_hash,
    )


def recomputed_hash(event: RecordedEvent) -> str:
    """The hash a recorded event's content makes now (its `hash` if nobody edited it)."""
    return hashlib.sha256(recorded_canonical_bytes(event)).hexdigest()


def ledger_link(prev_ledger_hash: str | None, event_hash: str) -> str:
    """The ledger-wide link of an event (migration 0005 computes the same in SQL)."""
    return hashlib.sha256(f"{prev_ledger_hash or ''}:{event_hash}".encode()).hexdigest()


def link_rows(prev_ledger_hash: str | None, rows: Sequence[dict[str, Any]]) -> str | None:
    """Fill each sealed row's `ledger_hash`, in order, after `prev_ledger_hash` (for stores
    that compute it themselves); returns the last one."""
    for row in rows:
        prev_ledger_hash = row["ledger_hash"] = ledger_link(prev_ledger_hash, row["hash"])
    return prev_ledger_hash


def event_rows(
    stream_id: str,
    new_events: Sequence[NewEvent],
    version: int,
    prev_hash: str | None,
    recorded_at: datetime,
) -> list[dict[str, Any]]:
    """The rows that record `new_events` after `version`: every column but the position,
    each hash chained to the one before. Every store records exactly these."""
    rows = []
    for offset, new in enumerate(new_events, start=1):
        payload = new.payload
        fields: dict[str, Any] = {
            "stream_id": stream_id,
            "stream_version": version + offset,
            "event_id": new.event_id,
            "type": payload.type,
            "data": normalize_data(payload.model_dump(mode="json")),
            "code": payload.code.value if payload.code else None,
            "actor": new.actor,
            "recorded_at": recorded_at,
            "prev_hash": prev_hash,
        }
        fields["hash"] = event_hash(**(fields | {"event_id": str(new.event_id)}))
        prev_hash = fields["hash"]
        rows.append(fields)
    return rows

"""What interfaces may show of a recorded event (contract §3): the one serializer behind the
HTTP event pages, the CLI's tables and files, and the export.

Job arguments keep their keys but not their values (an agent may have put a secret in one),
token hashes are withheld, and raw failure detail is for operators and auditors only. The
export alone keeps the stored data exactly, because its hashes must verify elsewhere.
"""

from __future__ import annotations

from typing import Any

from ledger.clock import format_time
from ledger.events import RecordedEvent

ARG_REDACTED = "(redacted)"
# `GET /v1/jobs/{id}/events` shows these of each event (agents read it).
JOB_EVENT_KEYS = ("position", "type", "code", "recorded_at", "data")


def public_event_data(data: dict[str, Any], *, detail: bool = True) -> dict[str, Any]:
    shown = dict(data)
    if isinstance(shown.get("args"), dict):
        shown["args"] = {key: ARG_REDACTED for key in shown["args"]}
    if "token_hash" in shown:
        shown["token_hash"] = ARG_REDACTED
    if not detail:
        shown.pop("detail", None)
    return shown


def public_event(event: RecordedEvent, *, raw: bool = False, detail: bool = True) -> dict[str, Any]:
    """One event with every stored column. `raw` keeps the data exactly (the export);
    `detail=False` drops raw failure detail (what agents may not read). Times are in the
    ledger's one text form, the one its hashes cover."""
    return {
        "position": event.position,
        "stream_id": event.stream_id,
        "stream_version": event.stream_version,
        "event_id": str(event.event_id),
        "type": event.type,
        "code": event.code.value if event.code else None,
        "actor": event.actor,
        "recorded_at": format_time(event.recorded_at),
        "data": event.data if raw else public_event_data(event.data, detail=detail),
        "prev_hash": event.prev_hash,
        "hash": event.hash,
    }


def job_event(event: RecordedEvent, *, detail: bool) -> dict[str, Any]:
    """An event as a job's own page shows it."""
    shown = public_event(event, detail=detail)
    return {key: shown[key] for key in JOB_EVENT_KEYS}

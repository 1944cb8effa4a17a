"""What interfaces may show of a recorded event (contract §3): the one serializer behind the
HTTP event pages, the CLI's tables and files, the console, and the export.

Job arguments are shown as the agent sent them, except the tool's declared secrets, whose
places say `(secret)` (they are stored sealed: `ledger.secrets`). A decision recorded before
secrets were declared (no `secret_paths`) keeps its keys but not its values, as it always did.
Token hashes and webhooks' sealed signing secrets are withheld, and what only staff
(operators, auditors) read is dropped for agents: raw failure detail, fingerprints, the
worker's identity and the global position. The hashes are for auditors. The export alone
keeps the stored data exactly (secrets sealed), because its hashes must verify elsewhere.
"""

from __future__ import annotations

from typing import Any

from ledger import secrets
from ledger.clock import format_time
from ledger.events import RecordedEvent

ARG_REDACTED = "(redacted)"
SECRET_SHOWN = secrets.SHOWN
# Raw exception text, a dependency's state (config or credentials version), `host:pid`.
STAFF_ONLY_KEYS = ("detail", "fingerprint", "worker")
HASH_KEYS = ("prev_hash", "hash")
# What an agent reads of an outcome: the envelope's fields, nothing else.
PUBLIC_OUTCOME_KEYS = (
    "attempt",
    "type",
    "result",
    "reason",
    "processed",
    "skipped",
    "total",
    "error",
    "cause",
    "budget",
)
# `GET /v1/jobs/{id}/events`: what everyone sees of each event; staff also see `position`.
JOB_EVENT_KEYS = ("stream_version", "type", "code", "recorded_at", "data")


def public_outcome(outcome: dict[str, Any]) -> dict[str, Any]:
    """An outcome (a late one, as the envelope lists it) as agents may read it."""
    return {key: outcome[key] for key in PUBLIC_OUTCOME_KEYS if key in outcome}


def public_event_data(data: dict[str, Any], *, detail: bool = True) -> dict[str, Any]:
    """`detail=False`: as agents may read it."""
    shown = dict(data)
    if isinstance(shown.get("args"), dict):
        paths = shown.get("secret_paths")
        if isinstance(paths, list):
            shown["args"] = secrets.shown(shown["args"], [p for p in paths if isinstance(p, str)])
        else:  # recorded when every argument value was withheld from pages
            shown["args"] = {key: ARG_REDACTED for key in shown["args"]}
    if "token_hash" in shown:
        shown["token_hash"] = ARG_REDACTED
    if shown.get("type") == "webhook.registered" and "secret" in shown:
        shown["secret"] = SECRET_SHOWN  # sealed, but no page has a use for the box
    if not detail:
        for key in STAFF_ONLY_KEYS:
            shown.pop(key, None)
        if isinstance(shown.get("outcome"), dict):  # a late outcome's own fields
            shown["outcome"] = public_outcome(shown["outcome"])
    return shown


def public_event(
    event: RecordedEvent, *, raw: bool = False, detail: bool = True, hashes: bool = True
) -> dict[str, Any]:
    """One event with every stored column. `raw` keeps the data exactly (the export);
    `detail=False` drops what agents may not read; `hashes=False` drops the hashes (for
    anyone but auditors). Times are in the ledger's one text form, the one its hashes cover."""
    shown = {
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
    if not hashes:
        for key in HASH_KEYS:
            del shown[key]
    return shown


def job_event(event: RecordedEvent, *, staff: bool) -> dict[str, Any]:
    """An event as a job's own page shows it: to agents (`staff=False`) without anything that
    tells about other jobs (the global position) or about the workers."""
    shown = public_event(event, detail=staff)
    keys = (*JOB_EVENT_KEYS, "position") if staff else JOB_EVENT_KEYS
    return {key: shown[key] for key in keys}

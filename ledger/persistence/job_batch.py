"""Postgres: a batch of job appends as one call of `outcomes_append_jobs` (the function is
whole in `migrations/functions/outcomes_append_jobs.sql`).

All the Python work happens before the call: the events are sealed (hashed, chained to the
view's `head_hash`) and folded into the next view with the same `evolve` every store uses.
The server checks the head and the invariants under the streams' and keys' locks, assigns write
positions, fills the view's `ledger_position` in, and answers one status per item. Ledger
positions and links come after commit, from the sequencer.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import orjson

from ledger.brake_view import BrakeView
from ledger.chain import event_rows
from ledger.errors import JobStreamError
from ledger.events import RecordedEvent, job_stream
from ledger.job_fold import evolve
from ledger.job_view import JobView
from ledger.persistence.appends import Appended, AppendStatus, JobAppend, JobAppended
from ledger.read_models import job_columns

CALL = "SELECT outcomes_append_jobs(%s::jsonb)"


@dataclass(frozen=True)
class Planned:
    item: JobAppend
    rows: list[dict[str, Any]]
    events: list[RecordedEvent]  # the rows as folded; the position comes with the answer
    view: JobView  # folded; its ledger_position is filled in once the server answers


def fast(item: JobAppend) -> bool:
    """Whether the server can take this item: it must know the head's hash (views written
    before `head_hash` existed go the general way)."""
    return item.before is None or item.before.head_hash is not None


def run(items: Sequence[JobAppend], now: datetime, call: Callable[[str], Any]) -> list[JobAppended]:
    """Plan every item, send the planned ones in one `call(payload)`, answer in item order."""
    planned: list[Planned | JobAppended] = [_plan_or_refuse(item, now) for item in items]
    sent = [p for p in planned if isinstance(p, Planned)]
    answers = iter(results(sent, call(payload(sent))) if sent else [])
    return [p if isinstance(p, JobAppended) else next(answers) for p in planned]


def _plan_or_refuse(item: JobAppend, now: datetime) -> Planned | JobAppended:
    try:
        return plan(item, now)
    except JobStreamError:
        # Only a closed job refuses to fold another outcome: the server would say the same.
        if item.before is not None and item.before.terminal:
            return JobAppended(AppendStatus.TERMINAL)
        raise


def plan(item: JobAppend, now: datetime) -> Planned:
    before = item.before
    version = before.stream_version if before else 0
    rows = event_rows(
        job_stream(item.job_id), item.events, version, before.head_hash if before else None, now
    )
    events = [RecordedEvent(position=0, **row) for row in rows]
    view = before
    for event in events:
        view = evolve(view, event)
    assert view is not None
    return Planned(item, rows, events, view)


def payload(planned: Sequence[Planned]) -> str:
    return orjson.dumps([_item(p) for p in planned], default=_encode).decode()


def _item(p: Planned) -> dict[str, Any]:
    lease = p.item.lease
    return {
        "stream_id": job_stream(p.item.job_id),
        "events": [row | {"event_id": str(row["event_id"])} for row in p.rows],
        "job": {
            "job_id": p.item.job_id,
            **job_columns(p.view),
            # Serialized by pydantic straight to JSON, embedded as it is (no dict in between).
            "view": orjson.Fragment(p.view.model_dump_json()),
        },
        "lease": None
        if lease is None
        else {
            "op": lease.op,
            "attempt": lease.attempt,
            "worker": lease.worker,
            "expires_at": lease.expires_at,
        },
        "brake_scopes": list(p.item.brake_scopes) if p.item.brake_scopes else None,
        "brakes_lock": p.item.brakes_lock,
        "notify": p.item.notify,
        "token_id": p.item.token_id,
        "quota": None
        if p.item.quota is None
        else {"limit": p.item.quota.limit, "since": p.item.quota.since},
    }


def _encode(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.isoformat()
    raise TypeError(f"cannot encode {type(value).__name__}")


def results(planned: Sequence[Planned], answer: Any) -> list[JobAppended]:
    answers = orjson.loads(answer) if isinstance(answer, str | bytes) else answer
    return [_result(p, a) for p, a in zip(planned, answers, strict=True)]


def _result(p: Planned, answer: dict[str, Any]) -> JobAppended:
    status = AppendStatus(answer["status"])
    if status is AppendStatus.OK:
        positions = answer["positions"]
        # Validated once when planned: only the server's (write) position is new.
        events = [
            event.model_copy(update={"position": pos})
            for pos, event in zip(positions, p.events, strict=True)
        ]
        view = p.view.model_copy(update={"ledger_position": positions[-1]})
        return JobAppended(status, Appended(events, view))
    if status is AppendStatus.BRAKED:
        held = sorted(
            (BrakeView.model_validate(b) for b in answer["brakes"]),
            key=lambda b: (b.pulled_at, b.brake_id),
        )
        return JobAppended(status, brakes=tuple(held))
    if status is AppendStatus.IDEMPOTENCY:
        holder = answer.get("view")
        return JobAppended(status, holder=JobView.model_validate(holder) if holder else None)
    if status is AppendStatus.QUOTA:
        oldest = answer.get("oldest")
        return JobAppended(status, oldest=datetime.fromisoformat(oldest) if oldest else None)
    return JobAppended(status)

"""Read model of the brake streams: which brakes hold, who pulled them and why (a pure fold)."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime

from pydantic import BaseModel, ConfigDict

from ledger.events import BrakePulled, BrakeReleased, RecordedEvent


class BrakeView(BaseModel):
    model_config = ConfigDict(frozen=True)

    brake_id: str
    scope: str
    reason: str
    operator: str
    pulled_at: datetime
    active: bool = True
    released_at: datetime | None = None
    released_by: str | None = None
    release_reason: str | None = None
    ledger_position: int


def evolve_brake(view: BrakeView | None, event: RecordedEvent) -> BrakeView:
    payload = event.payload
    if isinstance(payload, BrakePulled):
        return BrakeView(
            brake_id=payload.brake_id,
            scope=payload.scope,
            reason=payload.reason,
            operator=payload.operator,
            pulled_at=event.recorded_at,
            ledger_position=event.stored_position,
        )
    if isinstance(payload, BrakeReleased) and view is not None:
        return view.model_copy(
            update={
                "active": False,
                "released_at": event.recorded_at,
                "released_by": payload.operator,
                "release_reason": payload.reason,
                "ledger_position": event.stored_position,
            }
        )
    raise ValueError(f"{event.stream_id}: unexpected {event.type}")


def fold_brake(events: Iterable[RecordedEvent]) -> BrakeView | None:
    """A brake as its own stream's events say it is (checks never trust a stored row)."""
    view: BrakeView | None = None
    for event in events:
        view = evolve_brake(view, event)
    return view

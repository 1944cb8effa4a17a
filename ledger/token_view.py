"""Read model of the token streams: who may call, for which account, role and tools."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime

from pydantic import BaseModel, ConfigDict

from ledger.events import RecordedEvent, TokenCreated, TokenRevoked


class TokenView(BaseModel):
    model_config = ConfigDict(frozen=True)

    token_id: str
    account: str
    role: str
    tools: list[str] | None
    token_hash: str  # never the token itself
    revoked: bool = False
    created_at: datetime
    revoked_at: datetime | None = None
    ledger_position: int


def evolve_token(view: TokenView | None, event: RecordedEvent) -> TokenView:
    payload = event.payload
    if isinstance(payload, TokenCreated):
        return TokenView(
            token_id=payload.token_id,
            account=payload.account,
            role=payload.role,
            tools=payload.tools,
            token_hash=payload.token_hash,
            created_at=event.recorded_at,
            ledger_position=event.stored_position,
        )
    if isinstance(payload, TokenRevoked) and view is not None:
        return view.model_copy(
            update={
                "revoked": True,
                "revoked_at": event.recorded_at,
                "ledger_position": event.stored_position,
            }
        )
    raise ValueError(f"{event.stream_id}: unexpected {event.type}")


def fold_token(events: Iterable[RecordedEvent]) -> TokenView | None:
    """A token as its own stream's events say it is."""
    view: TokenView | None = None
    for event in events:
        view = evolve_token(view, event)
    return view


def presented(events: Iterable[RecordedEvent], token_hash: str) -> TokenView | None:
    """The token behind a presented secret's hash, from its events: the tokens table only
    says which stream to read, and a row pointed at another token's stream proves nothing."""
    view = fold_token(events)
    return view if view is not None and view.token_hash == token_hash else None

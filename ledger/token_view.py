"""Read model of the token streams: who may call, for which account, role and tools."""

from __future__ import annotations

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
            ledger_position=event.position,
        )
    if isinstance(payload, TokenRevoked) and view is not None:
        return view.model_copy(
            update={
                "revoked": True,
                "revoked_at": event.recorded_at,
                "ledger_position": event.position,
            }
        )
    raise ValueError(f"{event.stream_id}: unexpected {event.type}")

"""The ledger itself: `events`, append-only, with the partial indexes the writers' rules and
the brake checks read."""

from __future__ import annotations

from sqlalchemy import (
    CheckConstraint,
    Column,
    Index,
    Integer,
    String,
    Table,
    Uuid,
)

from ledger.events import TERMINAL_EVENT_TYPES
from ledger.persistence.schema_metadata import Json, Position, Time, metadata

events = Table(
    "events",
    metadata,
    Column("position", Position, primary_key=True, autoincrement=True),
    Column("stream_id", String(200), nullable=False),
    Column("stream_version", Integer, nullable=False),
    Column("event_id", Uuid(), nullable=False),
    Column("type", String(64), nullable=False),
    Column("data", Json, nullable=False),
    Column("code", String(64), nullable=True),
    Column("actor", String(200), nullable=False),
    Column("recorded_at", Time, nullable=False),
    Column("prev_hash", String(64), nullable=True),
    Column("hash", String(64), nullable=False),
    # The ledger-wide chain: this hash linked to the previous position's (ledger.chain).
    Column("ledger_hash", String(64), nullable=True),
    # Readers page from position 0: a row slipped in at 0 or below would go unverified.
    CheckConstraint("position > 0", name="ck_events_position_positive"),
    Index("uq_events_stream_version", "stream_id", "stream_version", unique=True),
    Index("uq_events_event_id", "event_id", unique=True),
    # Positions are never reused, even after the last row is deleted by a superuser.
    sqlite_autoincrement=True,
)

_terminal = events.c.type.in_(sorted(TERMINAL_EVENT_TYPES))
# At most one terminal event per job stream, whatever the writers do.
Index(
    "uq_events_one_terminal",
    events.c.stream_id,
    unique=True,
    postgresql_where=_terminal,
    sqlite_where=_terminal,
)

# Brake checks read pulls from events, not from the brakes read model (it could be edited).
_brake_pull = events.c.type == "brake.pulled"
Index(
    "ix_events_brake_pulls",
    events.c.stream_id,
    postgresql_where=_brake_pull,
    sqlite_where=_brake_pull,
)

# Re-dispatches are rare and counted by their evidence (`outcomes status`, /metrics).
_redispatched = events.c.type == "job.redispatched"
Index(
    "ix_events_redispatched",
    events.c.position,
    postgresql_where=_redispatched,
    sqlite_where=_redispatched,
)

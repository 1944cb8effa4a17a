"""The read side of the contract in SQL (Postgres and SQLite), on one connection: the job
reads (`sql_job_reads.py`, mixed in), brakes, tokens, events and the read models as stored.

Read models keep their whole view as JSON beside copies of the columns their indexes need;
queries filter on the columns and hand back the views. Account scoping happens here, in SQL,
so a page never carries another account's row.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import (
    Connection,
    bindparam,
    exists,
    func,
    literal,
    select,
    text,
)

from ledger.access import token_stream
from ledger.brake_view import BrakeView, evolve_brake, fold_brake
from ledger.brakes import brake_stream
from ledger.codes import Code
from ledger.events import RecordedEvent
from ledger.persistence.base import Reads
from ledger.persistence.errors import translated
from ledger.persistence.schema import (
    brakes,
    events,
    jobs,
    ledger_events,
    tokens,
)
from ledger.persistence.sql_audit import SqlAuditReads, as_stored, stored_columns, table_of
from ledger.persistence.sql_counts import SqlCountReads
from ledger.persistence.sql_fairness import SqlFairnessReads
from ledger.persistence.sql_job_reads import SqlJobReads
from ledger.persistence.sql_outbox import SqlOutboxReads
from ledger.persistence.sql_rebuild import SqlRebuildReads
from ledger.persistence.sql_rows import (
    EVENT_COLUMNS,
    JOB_CAUSE,
    ORDERED_COLUMNS,
    job_scope,
    row_to_event,
)
from ledger.persistence.sql_tree import SqlTreeReads
from ledger.persistence.sql_webhooks import SqlWebhookReads
from ledger.queries import EventFilter, Heads
from ledger.token_view import TokenView, fold_token, presented

# Built once: constructing SQLAlchemy statements is a real cost on the hot path.
_STREAM = (
    select(*EVENT_COLUMNS)
    .where(events.c.stream_id == bindparam("stream_id"))
    .order_by(events.c.stream_version)
)
# The last ledger position given, O(1): on Postgres the sequencer's head (its newest tick), never
# max(position) over `ledger_events`, which joins the two largest tables; on SQLite, sequenced
# at write, the events' newest rowid.
_SEQUENCER_HEAD = text("SELECT a.head FROM outcomes_sequencer_at() a")
_LAST_ROWID = select(func.coalesce(func.max(events.c.position), 0))
# A presented token is read from its own stream's events (the tokens table only names the
# stream); with the job a caller asks for, in the same round trip.
_TOKEN_EVENTS = (
    select(*EVENT_COLUMNS)
    .where(
        events.c.stream_id
        == select(literal(token_stream("")).concat(tokens.c.token_id))  # the stream's name
        .where(tokens.c.token_hash == bindparam("token_hash"))
        .scalar_subquery()
    )
    .order_by(events.c.stream_version)
)
_BRAKES_HOLDING = text("SELECT outcomes_brakes_holding(NULL)")
_LATER = events.alias("later")
# Brakes that hold, from events alone (a pull with nothing after it in its stream), over the
# partial index of pulls: the brakes table is for people to read, never for deciding.
_ACTIVE_PULLS = select(*EVENT_COLUMNS).where(
    events.c.type == "brake.pulled",
    ~exists().where(
        _LATER.c.stream_id == events.c.stream_id,
        _LATER.c.stream_version > events.c.stream_version,
    ),
)


class SqlReads(
    SqlTreeReads,
    SqlCountReads,
    SqlJobReads,
    SqlOutboxReads,
    SqlWebhookReads,
    SqlFairnessReads,
    SqlAuditReads,
    SqlRebuildReads,
    Reads,
):
    def __init__(self, conn: Connection) -> None:
        self.conn = conn

    # --- brakes ---------------------------------------------------------------------------

    def active_brakes(self) -> list[BrakeView]:
        if self.conn.dialect.name == "postgresql":  # the one brake read (migration 0005)
            held = self.conn.execute(_BRAKES_HOLDING).scalar() or []
            views = [BrakeView.model_validate(b) for b in held]
        else:
            pulls = (row_to_event(row) for row in self.conn.execute(_ACTIVE_PULLS))
            views = [evolve_brake(None, pull) for pull in pulls]
        return sorted(views, key=lambda b: (b.pulled_at, b.brake_id))

    def brake(self, brake_id: str) -> BrakeView | None:
        return fold_brake(self.read_stream(brake_stream(brake_id)))

    def recent_brakes(self, limit: int) -> list[BrakeView]:
        query = select(brakes.c.view).order_by(brakes.c.ledger_position.desc()).limit(limit)
        return [BrakeView.model_validate(row.view) for row in self.conn.execute(query)]

    def brakes_in_scope(self, scope: str) -> list[BrakeView]:
        query = select(brakes.c.view).where(brakes.c.scope == scope)
        views = [BrakeView.model_validate(row.view) for row in self.conn.execute(query)]
        return sorted(views, key=lambda b: (b.pulled_at, b.brake_id))

    def jobs_held(self, brake_ids: Sequence[str], account: str | None = None) -> dict[str, int]:
        if not brake_ids:
            return {}
        cause = JOB_CAUSE.label("cause")
        query = (
            select(cause, func.count())
            .where(
                *job_scope(account, None),
                jobs.c.code == Code.BRAKE_ENGAGED.value,
                JOB_CAUSE.in_(list(brake_ids)),
            )
            .group_by(JOB_CAUSE)
        )
        return {str(c): int(n) for c, n in self.conn.execute(query)}

    # --- tokens ---------------------------------------------------------------------------

    def token(self, token_id: str) -> TokenView | None:
        return fold_token(self.read_stream(token_stream(token_id)))

    def token_by_hash(self, token_hash: str) -> TokenView | None:
        rows = self.conn.execute(_TOKEN_EVENTS, {"token_hash": token_hash}).all()
        return presented((row_to_event(r) for r in rows), token_hash)

    def tokens(self) -> list[TokenView]:
        query = select(tokens.c.view).order_by(tokens.c.ledger_position)
        return [TokenView.model_validate(r.view) for r in self.conn.execute(query)]

    # --- events ---------------------------------------------------------------------------

    def read_stream(self, stream_id: str) -> list[RecordedEvent]:
        with translated(stream_id=stream_id):
            rows = self.conn.execute(_STREAM, {"stream_id": stream_id})
            return [row_to_event(r) for r in rows]

    def find_events(self, where: EventFilter) -> list[RecordedEvent]:
        ev = ledger_events  # in ledger order: a page after a position never misses one later
        query = select(*ORDERED_COLUMNS).where(ev.c.position > where.after)
        if where.account is not None or where.tool is not None:
            # Only job streams carry an account or a tool; the read model knows which is whose.
            owned = select(literal("job-").concat(jobs.c.job_id)).where(
                *job_scope(where.account, where.tool)
            )
            query = query.where(ev.c.stream_id.in_(owned))
        if where.type is not None:
            query = query.where(ev.c.type == where.type)
        if where.code is not None:
            query = query.where(ev.c.code == where.code)
        if where.since is not None:
            query = query.where(ev.c.recorded_at >= where.since)
        if where.until is not None:
            query = query.where(ev.c.recorded_at < where.until)
        query = query.order_by(ev.c.position).limit(where.limit)
        return [row_to_event(row) for row in self.conn.execute(query)]

    def last_event_by(self, actor: str) -> RecordedEvent | None:
        # Walks the position index from the end: the actor's last event is usually recent.
        query = select(*EVENT_COLUMNS).where(events.c.actor == actor)
        row = self.conn.execute(query.order_by(events.c.position.desc()).limit(1)).first()
        return row_to_event(row) if row is not None else None

    def heads(self) -> Heads:
        # At the sequencer's head: what a digest covers is the ledger in its one order.
        ev = ledger_events
        position = self.last_position()
        upto = ev.c.position <= position
        last = (
            select(ev.c.stream_id, func.max(ev.c.stream_version).label("version"))
            .where(upto)
            .group_by(ev.c.stream_id)
            .subquery()
        )
        query = select(ev.c.stream_id, ev.c.stream_version, ev.c.hash).join(
            last,
            (ev.c.stream_id == last.c.stream_id) & (ev.c.stream_version == last.c.version),
        )
        heads = {r.stream_id: (r.stream_version, r.hash) for r in self.conn.execute(query)}
        count = self.conn.execute(select(func.count()).select_from(ev).where(upto))
        at = select(ev.c.ledger_hash).where(ev.c.position == position)
        return Heads(
            position=position,
            events=int(count.scalar_one()),
            heads=heads,
            ledger_hash=self.conn.execute(at).scalar(),
        )

    def last_position(self) -> int:
        head = _SEQUENCER_HEAD if self.conn.dialect.name == "postgresql" else _LAST_ROWID
        return int(self.conn.execute(head).scalar_one())

    # --- read models, as stored -----------------------------------------------------------

    def read_model_rows(self, table: str, after: str | None, limit: int) -> list[dict[str, Any]]:
        found, key, _ = table_of(table)
        query = select(*stored_columns(found)).order_by(key).limit(limit)
        if after is not None:
            query = query.where(key > after)
        return [
            {name: as_stored(name, value) for name, value in row.items()}
            for row in self.conn.execute(query).mappings()
        ]

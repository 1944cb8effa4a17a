"""The read side of the contract in SQL (Postgres and SQLite), on one connection.

Read models keep their whole view as JSON beside copies of the columns their indexes need;
queries filter on the columns and hand back the views. Account scoping happens here, in SQL,
so a page never carries another account's row.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

import orjson
from sqlalchemy import (
    ColumnElement,
    Connection,
    Text,
    and_,
    bindparam,
    cast,
    exists,
    false,
    func,
    literal,
    null,
    select,
    text,
    true,
    union_all,
)

from ledger.access import token_stream
from ledger.brake_view import BrakeView, evolve_brake, fold_brake
from ledger.brakes import brake_stream
from ledger.clock import utc
from ledger.codes import Code, Status
from ledger.events import RecordedEvent
from ledger.job_view import JobView
from ledger.persistence.base import Reads
from ledger.persistence.errors import translated
from ledger.persistence.schema import READ_MODEL_TABLES, brakes, events, jobs, leases, tokens
from ledger.queries import EventFilter, Heads, JobCount, JobFilter, JobSummary, MissingOutcome
from ledger.reconcile_rules import OpenJob
from ledger.token_view import TokenView, fold_token, presented

if TYPE_CHECKING:  # Row's type parameters differ across SQLAlchemy 2.x releases
    from sqlalchemy import Row

    RowT = Row[*tuple[Any, ...]]

_IN_CHUNK = 500  # ids per IN (...) list: SQLite caps bound parameters

EVENT_COLUMNS = (
    events.c.position,
    events.c.stream_id,
    events.c.stream_version,
    events.c.event_id,
    events.c.type,
    events.c.data,
    events.c.code,
    events.c.actor,
    events.c.recorded_at,
    events.c.prev_hash,
    events.c.hash,
    events.c.ledger_hash,
)
# Built once: constructing SQLAlchemy statements is a real cost on the hot path.
_JOB = select(jobs.c.view).where(jobs.c.job_id == bindparam("job_id"))
_JOBS_BY_ID = select(jobs.c.view).where(jobs.c.job_id.in_(bindparam("ids", expanding=True)))
_STREAM = (
    select(*EVENT_COLUMNS)
    .where(events.c.stream_id == bindparam("stream_id"))
    .order_by(events.c.stream_version)
)
PAGE = (
    select(*EVENT_COLUMNS)
    .where(events.c.position > bindparam("after"))
    .order_by(events.c.position)
    .limit(bindparam("limit"))
)
_LAST_POSITION = select(func.coalesce(func.max(events.c.position), 0))
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
_TOKEN_EVENTS_AND_JOB = _TOKEN_EVENTS.add_columns(
    select(jobs.c.view).where(jobs.c.job_id == bindparam("job_id")).scalar_subquery().label("job")
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
_READ_MODELS = {table.name: table for table in READ_MODEL_TABLES}
# A job's error cause, read from its view (the brake a BRAKE_ENGAGED names, the silence an
# OUTCOME_MISSING names): `->>`/`#>>` on Postgres, json_extract on SQLite.
_CAUSE = jobs.c.view[("error", "cause")].as_string()


def row_to_event(row: RowT) -> RecordedEvent:
    return RecordedEvent(
        position=row.position,
        stream_id=row.stream_id,
        stream_version=row.stream_version,
        event_id=row.event_id,
        type=row.type,
        data=row.data,
        code=row.code,
        actor=row.actor,
        recorded_at=utc(row.recorded_at),
        prev_hash=row.prev_hash,
        hash=row.hash,
        ledger_hash=row.ledger_hash,
    )


class SqlReads(Reads):
    def __init__(self, conn: Connection) -> None:
        self.conn = conn

    # --- jobs -----------------------------------------------------------------------------

    def job(self, job_id: str) -> JobView | None:
        row = self.conn.execute(_JOB, {"job_id": job_id}).first()
        return JobView.model_validate(row.view) if row else None

    def jobs_by_id(self, job_ids: Sequence[str]) -> dict[str, JobView]:
        found: dict[str, JobView] = {}
        for start in range(0, len(job_ids), _IN_CHUNK):
            chunk = list(job_ids[start : start + _IN_CHUNK])
            for row in self.conn.execute(_JOBS_BY_ID, {"ids": chunk}):
                view = JobView.model_validate(row.view)
                found[view.job_id] = view
        return found

    def jobs(self, where: JobFilter) -> list[JobView]:
        query = select(jobs.c.view).where(jobs.c.ledger_position > where.after)
        if where.before is not None:
            query = query.where(jobs.c.ledger_position < where.before)
        equal = {
            jobs.c.account: where.account,
            jobs.c.status: where.status,
            jobs.c.code: where.code,
            jobs.c.tool: where.tool,
            jobs.c.spends: where.spends,
        }
        query = query.where(
            *(column == value for column, value in equal.items() if value is not None)
        )
        if where.since is not None:
            query = query.where(jobs.c.created_at >= where.since)
        if where.until is not None:
            query = query.where(jobs.c.created_at < where.until)
        order = jobs.c.ledger_position.desc() if where.newest_first else jobs.c.ledger_position
        query = query.order_by(order).limit(where.limit)
        return [JobView.model_validate(row.view) for row in self.conn.execute(query)]

    def job_by_idempotency_key(self, account: str, key: str) -> JobView | None:
        query = select(jobs.c.view).where(
            and_(jobs.c.account == account, jobs.c.idempotency_key == key)
        )
        row = self.conn.execute(query).first()
        return JobView.model_validate(row.view) if row else None

    def accepted_in_window(
        self, account: str, tool: str, since: datetime
    ) -> tuple[int, datetime | None]:
        query = select(func.count(), func.min(jobs.c.created_at)).where(
            and_(
                jobs.c.account == account,
                jobs.c.tool == tool,
                jobs.c.accepted.is_(True),
                jobs.c.created_at > since,
            )
        )
        count, oldest = self.conn.execute(query).one()
        return int(count), utc(oldest) if oldest is not None else None

    def job_positions(self, job_ids: Sequence[str]) -> dict[str, int]:
        found: dict[str, int] = {}
        for start in range(0, len(job_ids), _IN_CHUNK):
            chunk = job_ids[start : start + _IN_CHUNK]
            query = select(jobs.c.job_id, jobs.c.ledger_position).where(jobs.c.job_id.in_(chunk))
            found.update({row.job_id: int(row.ledger_position) for row in self.conn.execute(query)})
        return found

    def overdue_jobs(self, now: datetime, cutoff: datetime) -> list[OpenJob]:
        # One index range per open status (UNION ALL, not OR): each branch is a plain index
        # scan on ix_jobs_open, which marks entries of dead row versions the first time it
        # meets them, so closed jobs' leftovers cost one pass, not every pass until VACUUM.
        still_open = jobs.c.terminal == false()
        no_lease = cast(null(), leases.c.expires_at.type).label("expires_at")
        queued = select(jobs.c.view, no_lease).where(
            still_open, jobs.c.status == Status.QUEUED.value, jobs.c.updated_at < cutoff
        )
        retrying = select(jobs.c.view, no_lease).where(
            still_open, jobs.c.status == Status.RETRYING.value, jobs.c.due_at < cutoff
        )
        running = (
            select(jobs.c.view, leases.c.expires_at)
            .select_from(jobs.outerjoin(leases, leases.c.job_id == jobs.c.job_id))
            .where(
                still_open,
                jobs.c.status == Status.RUNNING.value,
                func.coalesce(leases.c.expires_at, jobs.c.lease_expires_at) < now,
            )
        )
        rows = self.conn.execute(union_all(queued, retrying, running)).all()
        return [
            OpenJob(
                JobView.model_validate(row.view),
                utc(row.expires_at) if row.expires_at is not None else None,
            )
            for row in rows
        ]

    def summarize_jobs(
        self,
        account: str | None,
        tool: str | None = None,
        since: datetime | None = None,
        until: datetime | None = None,
    ) -> JobSummary:
        query = select(jobs.c.status, jobs.c.code, jobs.c.tool, jobs.c.account, func.count()).where(
            *_job_scope(account, tool)
        )
        if since is not None:
            query = query.where(jobs.c.created_at >= since)
        if until is not None:
            query = query.where(jobs.c.created_at < until)
        query = query.group_by(jobs.c.status, jobs.c.code, jobs.c.tool, jobs.c.account)
        return JobSummary.from_groups(self.conn.execute(query))

    def count_statuses(
        self,
        account: str | None,
        tool: str | None = None,
        since: datetime | None = None,
        until: datetime | None = None,
    ) -> dict[str, int]:
        query = select(jobs.c.status, func.count()).where(*_job_scope(account, tool))
        if since is not None:
            query = query.where(jobs.c.created_at >= since)
        if until is not None:
            query = query.where(jobs.c.created_at < until)
        found = self.conn.execute(query.group_by(jobs.c.status))
        return {str(status): int(n) for status, n in sorted(found)}

    def count_jobs(self) -> list[JobCount]:
        columns = (jobs.c.accepted, jobs.c.status, jobs.c.code, jobs.c.tool)
        query = select(*columns, func.count()).group_by(*columns).order_by(*columns)
        return [JobCount(bool(a), s, c, t, int(n)) for a, s, c, t, n in self.conn.execute(query)]

    def missing_outcomes(
        self, account: str | None, since: datetime, limit: int
    ) -> list[MissingOutcome]:
        # Three columns, not the view: a long window decodes no JSON document per job.
        query = (
            select(jobs.c.updated_at, _CAUSE.label("cause"), jobs.c.spends)
            .where(
                *_job_scope(account, None),
                jobs.c.code == Code.OUTCOME_MISSING.value,
                jobs.c.updated_at >= since,
            )
            .order_by(jobs.c.ledger_position.desc())
            .limit(limit)
        )
        return [
            MissingOutcome(utc(row.updated_at), row.cause, bool(row.spends))
            for row in self.conn.execute(query)
        ]

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

    def waiting_jobs(self, scope: str, account: str | None = None) -> int:
        query = select(func.count()).where(
            jobs.c.terminal == false(),
            jobs.c.status.in_([Status.QUEUED.value, Status.RETRYING.value]),
        )
        kind, _, name = scope.partition(":")
        if kind == "tool":
            query = query.where(jobs.c.tool == name)
        elif kind == "account":
            query = query.where(jobs.c.account == name)
        if account is not None:
            query = query.where(jobs.c.account == account)
        return int(self.conn.execute(query).scalar_one())

    def recent_brakes(self, limit: int) -> list[BrakeView]:
        query = select(brakes.c.view).order_by(brakes.c.ledger_position.desc()).limit(limit)
        return [BrakeView.model_validate(row.view) for row in self.conn.execute(query)]

    def jobs_held(self, brake_ids: Sequence[str], account: str | None = None) -> dict[str, int]:
        if not brake_ids:
            return {}
        cause = _CAUSE.label("cause")
        query = (
            select(cause, func.count())
            .where(
                *_job_scope(account, None),
                jobs.c.code == Code.BRAKE_ENGAGED.value,
                _CAUSE.in_(list(brake_ids)),
            )
            .group_by(_CAUSE)
        )
        return {str(c): int(n) for c, n in self.conn.execute(query)}

    # --- tokens ---------------------------------------------------------------------------

    def token(self, token_id: str) -> TokenView | None:
        return fold_token(self.read_stream(token_stream(token_id)))

    def token_by_hash(self, token_hash: str) -> TokenView | None:
        rows = self.conn.execute(_TOKEN_EVENTS, {"token_hash": token_hash}).all()
        return presented((row_to_event(r) for r in rows), token_hash)

    def token_and_job(
        self, token_hash: str, job_id: str
    ) -> tuple[TokenView | None, JobView | None]:
        params = {"token_hash": token_hash, "job_id": job_id}
        rows = self.conn.execute(_TOKEN_EVENTS_AND_JOB, params).all()
        token = presented((row_to_event(r) for r in rows), token_hash)
        if token is None or rows[0].job is None:
            return token, None
        return token, JobView.model_validate(rows[0].job)

    def tokens(self) -> list[TokenView]:
        query = select(tokens.c.view).order_by(tokens.c.ledger_position)
        return [TokenView.model_validate(r.view) for r in self.conn.execute(query)]

    # --- events ---------------------------------------------------------------------------

    def read_stream(self, stream_id: str) -> list[RecordedEvent]:
        with translated(stream_id=stream_id):
            rows = self.conn.execute(_STREAM, {"stream_id": stream_id})
            return [row_to_event(r) for r in rows]

    def find_events(self, where: EventFilter) -> list[RecordedEvent]:
        query = select(*EVENT_COLUMNS).where(events.c.position > where.after)
        if where.account is not None or where.tool is not None:
            # Only job streams carry an account or a tool; the read model knows which is whose.
            owned = select(literal("job-").concat(jobs.c.job_id)).where(
                *_job_scope(where.account, where.tool)
            )
            query = query.where(events.c.stream_id.in_(owned))
        if where.type is not None:
            query = query.where(events.c.type == where.type)
        if where.code is not None:
            query = query.where(events.c.code == where.code)
        if where.since is not None:
            query = query.where(events.c.recorded_at >= where.since)
        if where.until is not None:
            query = query.where(events.c.recorded_at < where.until)
        query = query.order_by(events.c.position).limit(where.limit)
        return [row_to_event(row) for row in self.conn.execute(query)]

    def last_event_by(self, actor: str) -> RecordedEvent | None:
        # Walks the position index from the end: the actor's last event is usually recent.
        query = select(*EVENT_COLUMNS).where(events.c.actor == actor)
        row = self.conn.execute(query.order_by(events.c.position.desc()).limit(1)).first()
        return row_to_event(row) if row is not None else None

    def heads(self) -> Heads:
        position = int(self.conn.execute(_LAST_POSITION).scalar_one())
        upto = events.c.position <= position
        last = (
            select(events.c.stream_id, func.max(events.c.stream_version).label("version"))
            .where(upto)
            .group_by(events.c.stream_id)
            .subquery()
        )
        query = select(events.c.stream_id, events.c.stream_version, events.c.hash).join(
            last,
            (events.c.stream_id == last.c.stream_id) & (events.c.stream_version == last.c.version),
        )
        heads = {r.stream_id: (r.stream_version, r.hash) for r in self.conn.execute(query)}
        count = self.conn.execute(select(func.count()).select_from(events).where(upto))
        at = select(events.c.ledger_hash).where(events.c.position == position)
        return Heads(
            position=position,
            events=int(count.scalar_one()),
            heads=heads,
            ledger_hash=self.conn.execute(at).scalar(),
        )

    def last_position(self) -> int:
        return int(self.conn.execute(_LAST_POSITION).scalar_one())

    # --- read models, as stored -----------------------------------------------------------

    def read_model_rows(self, table: str, after: str | None, limit: int) -> list[dict[str, Any]]:
        found = _READ_MODELS.get(table)
        if found is None:
            raise ValueError(f"{table!r} is not a read model")
        key = next(iter(found.primary_key.columns))
        # The view as text, decoded here: a view damaged into something that is not JSON must
        # reach the comparison as it is, not fail the whole page.
        columns = [cast(c, Text).label(c.name) if c.name == "view" else c for c in found.c]
        query = select(*columns).order_by(key).limit(limit)
        if after is not None:
            query = query.where(key > after)
        return [
            {name: _as_stored(name, value) for name, value in row.items()}
            for row in self.conn.execute(query).mappings()
        ]


def _as_stored(name: str, value: Any) -> Any:
    if isinstance(value, datetime):
        return utc(value)
    if name == "view" and isinstance(value, str):
        try:
            return orjson.loads(value)
        except orjson.JSONDecodeError:
            return value
    return value


def _job_scope(account: str | None, tool: str | None) -> list[ColumnElement[bool]]:
    clauses: list[ColumnElement[bool]] = [true()]
    if account is not None:
        clauses.append(jobs.c.account == account)
    if tool is not None:
        clauses.append(jobs.c.tool == tool)
    return [and_(*clauses)]

"""Read-only queries behind the HTTP API that the core's readers do not cover: the auditors'
event pages and summary, long-poll positions, and the one-round-trip
token + job read of `GET /v1/jobs/{id}`.

Account scoping happens here, in SQL, so that a page never carries another account's row
(`account=None` means every account: a token scoped to `*`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime

from sqlalchemy import ColumnElement, Connection, and_, func, literal, select, true

from ledger.events import RecordedEvent
from ledger.job_view import JobView
from ledger.persistence.errors import translated
from ledger.persistence.jobs import load_job
from ledger.persistence.schema import events, jobs, tokens
from ledger.persistence.store import EventStore, row_to_event
from ledger.persistence.tokens import hash_token
from ledger.token_view import TokenView

_IN_CHUNK = 500  # ids per IN (...) list: SQLite caps bound parameters


@dataclass(frozen=True)
class EventFilter:
    account: str | None = None  # None: every account, brake and token streams included
    tool: str | None = None
    type: str | None = None
    code: str | None = None
    since: datetime | None = None
    until: datetime | None = None
    after: int = 0
    limit: int = 100


@dataclass(frozen=True)
class JobSummary:
    jobs: int
    by_status: dict[str, int] = field(default_factory=dict)
    by_code: dict[str, int] = field(default_factory=dict)
    by_tool: dict[str, int] = field(default_factory=dict)
    by_account: dict[str, int] = field(default_factory=dict)


def find_events(conn: Connection, where: EventFilter) -> list[RecordedEvent]:
    """Events matching the filter, in position order, at most `limit`."""
    query = select(events).where(events.c.position > where.after)
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
    return [row_to_event(row) for row in conn.execute(query)]


def summarize_jobs(
    conn: Connection,
    account: str | None,
    tool: str | None = None,
    since: datetime | None = None,
    until: datetime | None = None,
) -> JobSummary:
    """Counts of jobs by status, code, tool and account, in one grouped pass."""
    query = select(jobs.c.status, jobs.c.code, jobs.c.tool, jobs.c.account, func.count()).where(
        *_job_scope(account, tool)
    )
    if since is not None:
        query = query.where(jobs.c.created_at >= since)
    if until is not None:
        query = query.where(jobs.c.created_at < until)
    query = query.group_by(jobs.c.status, jobs.c.code, jobs.c.tool, jobs.c.account)
    counts: dict[str, Counter[str]] = {k: Counter() for k in ("status", "code", "tool", "account")}
    total = 0
    for status, code, tool_name, account_name, n in conn.execute(query):
        total += n
        counts["status"][status] += n
        counts["tool"][tool_name] += n
        counts["account"][account_name] += n
        if code is not None:
            counts["code"][code] += n
    return JobSummary(
        jobs=total,
        by_status=dict(sorted(counts["status"].items())),
        by_code=dict(sorted(counts["code"].items())),
        by_tool=dict(sorted(counts["tool"].items())),
        by_account=dict(sorted(counts["account"].items())),
    )


def job_positions(conn: Connection, job_ids: Sequence[str]) -> dict[str, int]:
    """The current `ledger_position` of each known job (long-polls compare it to theirs)."""
    found: dict[str, int] = {}
    for start in range(0, len(job_ids), _IN_CHUNK):
        chunk = job_ids[start : start + _IN_CHUNK]
        query = select(jobs.c.job_id, jobs.c.ledger_position).where(jobs.c.job_id.in_(chunk))
        found.update({row.job_id: int(row.ledger_position) for row in conn.execute(query)})
    return found


@contextmanager
def one_statement(store: EventStore) -> Iterator[Connection]:
    """A connection for a single read-only statement.

    On Postgres it runs in autocommit: one statement is atomic on its own, and the BEGIN and
    COMMIT round trips of a read transaction would triple what the hot reads cost. SQLite
    reads stay in the store's read transaction (it is local: no round trips to save)."""
    if store.dialect != "postgresql":
        with store.reading() as conn:
            yield conn
        return
    with translated(), store.engine.connect() as conn:
        yield conn.execution_options(isolation_level="AUTOCOMMIT")


def fetch_job(store: EventStore, job_id: str) -> JobView | None:
    with one_statement(store) as conn:
        return load_job(conn, job_id)


def token_and_job(
    conn: Connection, token: str, job_id: str
) -> tuple[TokenView | None, JobView | None]:
    """The caller's token (as `tokens.authenticate` finds it) and the job, in one statement:
    the agents' hottest path costs one round trip, as a bare read of the job would."""
    query = (
        select(tokens.c.view.label("token"), jobs.c.view.label("job"))
        .select_from(tokens.outerjoin(jobs, jobs.c.job_id == job_id))
        .where(tokens.c.token_hash == hash_token(token))
    )
    row = conn.execute(query).first()
    if row is None:
        return None, None
    view = TokenView.model_validate(row.token)
    if view.revoked:
        return None, None
    return view, JobView.model_validate(row.job) if row.job is not None else None


def _job_scope(account: str | None, tool: str | None) -> list[ColumnElement[bool]]:
    clauses: list[ColumnElement[bool]] = [true()]
    if account is not None:
        clauses.append(jobs.c.account == account)
    if tool is not None:
        clauses.append(jobs.c.tool == tool)
    return [and_(*clauses)]

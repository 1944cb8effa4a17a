"""Fairness's part of the contract in SQL (Postgres and SQLite; `fairness_contract.py`): an
account's live leases and its messages in the broker, the jobs its dispatch window holds
back, and the submit bucket's one statement. Mixed into `SqlReads` over the same connection.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from datetime import datetime

from sqlalchemy import BindParameter, Connection, Engine, bindparam, false, func, or_, select, text

from ledger.job_view import JobView
from ledger.persistence.errors import translated
from ledger.persistence.schema import dispatches, jobs, leases
from ledger.queueing import WAITING

_WAITING = [s.value for s in WAITING]
_OPEN = jobs.c.terminal == false()
_VERSION = jobs.c.view["stream_version"].as_integer()
_UNCONFIRMED = or_(dispatches.c.job_id.is_(None), dispatches.c.version < _VERSION)
_WITH_DISPATCH = jobs.outerjoin(dispatches, dispatches.c.job_id == jobs.c.job_id)
_ACCOUNTS: BindParameter[str] = bindparam("accounts", expanding=True)

_RUNNING = (
    select(jobs.c.account, func.count().label("n"))
    .select_from(leases.join(jobs, jobs.c.job_id == leases.c.job_id))
    .where(jobs.c.account.in_(_ACCOUNTS), leases.c.expires_at > bindparam("now"))
    .group_by(jobs.c.account)
)
_QUEUED = (
    select(jobs.c.account, func.count().label("n"))
    .select_from(dispatches.join(jobs, jobs.c.job_id == dispatches.c.job_id))
    .where(
        _OPEN,
        jobs.c.status.in_(_WAITING),
        jobs.c.account.in_(_ACCOUNTS),
        dispatches.c.version >= _VERSION,
    )
    .group_by(jobs.c.account)
)
_HELD = (
    select(jobs.c.view)
    .select_from(_WITH_DISPATCH)
    .where(_OPEN, jobs.c.status.in_(_WAITING), jobs.c.account == bindparam("account"), _UNCONFIRMED)
    .order_by(jobs.c.updated_at)
    .limit(bindparam("limit"))
)
_HELD_ACCOUNTS = (
    select(jobs.c.account)
    .select_from(_WITH_DISPATCH)
    .where(_OPEN, jobs.c.status.in_(_WAITING), _UNCONFIRMED)
    .group_by(jobs.c.account)
    .limit(bindparam("limit"))
)

# The bucket, refilled and taken in one statement: `level` is what it holds now (refilled
# since `at` at `rate`, at most `burst`); a take leaves level - 1 when level >= 1, else
# level (nothing taken), and says which. Postgres reads its own clock, so every API host
# shares one time; SQLite is one host's file, and takes that host's.
_LEVEL = "LEAST(:burst, b.tokens + GREATEST(0, EXCLUDED.at - b.at) * :rate)"
_TAKE_POSTGRES = text(
    f"""
    INSERT INTO rate_buckets AS b (account, tokens, at, granted)
    VALUES (:account, :burst - 1, extract(epoch FROM clock_timestamp()), true)
    ON CONFLICT (account) DO UPDATE SET
        tokens = {_LEVEL} - CASE WHEN {_LEVEL} >= 1 THEN 1 ELSE 0 END,
        granted = {_LEVEL} >= 1,
        at = GREATEST(b.at, EXCLUDED.at)
    RETURNING granted, tokens
    """
)
_LEVEL_SQLITE = "min(:burst, b.tokens + max(0, excluded.at - b.at) * :rate)"
_TAKE_SQLITE = text(
    f"""
    INSERT INTO rate_buckets AS b (account, tokens, at, granted)
    VALUES (:account, :burst - 1, :now, 1)
    ON CONFLICT (account) DO UPDATE SET
        tokens = {_LEVEL_SQLITE} - CASE WHEN {_LEVEL_SQLITE} >= 1 THEN 1 ELSE 0 END,
        granted = {_LEVEL_SQLITE} >= 1,
        at = max(b.at, excluded.at)
    RETURNING granted, tokens
    """
)


class SqlFairnessReads:
    conn: Connection

    def running_by_account(self, accounts: Sequence[str], now: datetime) -> dict[str, int]:
        if not accounts:
            return {}
        rows = self.conn.execute(_RUNNING, {"accounts": list(accounts), "now": now})
        return {row.account: int(row.n) for row in rows}

    def queued_by_account(self, accounts: Sequence[str]) -> dict[str, int]:
        if not accounts:
            return {}
        rows = self.conn.execute(_QUEUED, {"accounts": list(accounts)})
        return {row.account: int(row.n) for row in rows}

    def held_jobs(self, account: str, limit: int) -> list[JobView]:
        rows = self.conn.execute(_HELD, {"account": account, "limit": limit})
        return [JobView.model_validate(row.view) for row in rows]

    def held_accounts(self, limit: int) -> list[str]:
        return [row.account for row in self.conn.execute(_HELD_ACCOUNTS, {"limit": limit})]


def take_submit_token(engine: Engine, account: str, rate_per_s: float, burst: int) -> float:
    """One statement in its own transaction (autocommit on Postgres: one round trip)."""
    values = {"account": account, "rate": rate_per_s, "burst": float(burst)}
    postgres = engine.dialect.name == "postgresql"
    with translated(), engine.connect() as conn:
        if postgres:
            conn = conn.execution_options(isolation_level="AUTOCOMMIT")
            row = conn.execute(_TAKE_POSTGRES, values).one()
        else:
            with conn.begin():
                row = conn.execute(_TAKE_SQLITE, values | {"now": time.time()}).one()
    if row.granted:
        return 0.0
    return max(0.001, (1.0 - float(row.tokens)) / rate_per_s)

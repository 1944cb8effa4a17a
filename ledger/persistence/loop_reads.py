"""A job's read on the API's event loop (Postgres): the agents' GET without a thread hop.

The GET reads the job (and whether the caller's token still stands) once before it waits and
once when it is woken. Each read on a thread costs the hop as much CPU as the read itself
(the thread's wake-up and the loop's), so on Postgres these reads run on a few async psycopg
connections of the loop that serves the request. Same statements, same parsing, same
translated errors as `SqlStore.read_job`.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import psycopg

from ledger.job_view import JobView
from ledger.persistence.errors import translated

JOB_TEXT = "SELECT view::text FROM jobs WHERE job_id = %s"
# A token stands while its row says it is not revoked; no row is no token. The row, not the
# token's stream: a revocation can be in any partition after the token's making, and the events'
# read looked in every one (0025). A trigger refuses a row that says "not revoked" against the
# token's events (the application's role may write the read models, never un-revoke).
JOB_TEXT_AND_REVOKED = (
    "SELECT (SELECT view::text FROM jobs WHERE job_id = %s),"
    " (SELECT coalesce(bool_or(revoked), true) FROM tokens WHERE token_id = %s)"
)
CONNECTIONS = 4  # reads are one short statement each: a few connections serve many waiters
# The loop's connections run only these reads, each by a key an index holds, with plans
# cached per connection: a plan made while the newest window of `jobs` (or partition of
# `events`) was small scanned it whole at every read, for as long as the connection lived,
# as it grew (VACUUMed empty, then 10k calls: an agent's p50 15 -> 56 ms). Refused, the scan
# is never planned. And the plans are generic: left to choose, the plan cache planned each read
# again (a generic plan's estimate counts every partition, though the executor prunes all but
# the job's), which cost more than the read: at 30 partitions 5.4 ms a read, 0.26 ms generic.
POINT_READS = ("enable_seqscan=off", "plan_cache_mode=force_generic_plan")


def job_statement(job_id: str, token_id: str | None) -> tuple[str, tuple[str, ...]]:
    if token_id is None:
        return JOB_TEXT, (job_id,)
    return JOB_TEXT_AND_REVOKED, (job_id, token_id)


def job_answer(row: Any, token_id: str | None) -> tuple[JobView | None, bool]:
    """The view (None: no such job) and whether the token stands (True without a token)."""
    view = None if row is None or row[0] is None else JobView.model_validate_json(row[0])
    return view, (token_id is None or not row[1])


class LoopJobReads:
    """A few autocommit connections of one event loop, opened as reads need them; one that
    fails is closed and replaced by the next read. Used only on the loop that made it."""

    def __init__(self, dsn: str, connections: int = CONNECTIONS) -> None:
        self._dsn = dsn
        self._slots = asyncio.Semaphore(connections)
        self._idle: list[psycopg.AsyncConnection[Any]] = []

    async def read_job(
        self, job_id: str, token_id: str | None = None
    ) -> tuple[JobView | None, bool]:
        statement, params = job_statement(job_id, token_id)
        async with self._slots:
            with translated():  # connecting fails too while the server is away
                conn = self._idle.pop() if self._idle else await self._connect()
            try:
                with translated():
                    cursor = await conn.execute(statement, params)
                    row = await cursor.fetchone()
            except BaseException:
                await _discard(conn)  # broken, or cancelled mid-statement: never reused
                raise
            self._idle.append(conn)
        return job_answer(row, token_id)

    async def _connect(self) -> psycopg.AsyncConnection[Any]:
        return await psycopg.AsyncConnection.connect(self._dsn, autocommit=True)

    async def close(self) -> None:
        idle, self._idle = self._idle, []
        for conn in idle:
            await _discard(conn)


async def _discard(conn: psycopg.AsyncConnection[Any]) -> None:
    with contextlib.suppress(psycopg.Error, OSError):  # already gone
        await conn.close()

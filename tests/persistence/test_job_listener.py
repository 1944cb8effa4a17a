"""The long-polls' listener on Postgres: every notification of a commit reaches `on_jobs`, and
when its connection is cut it reconnects, says so (`on_connect`: waiters re-read) and goes on
delivering."""

from __future__ import annotations

import asyncio
import contextlib
import uuid

import psycopg
import pytest

from ledger.events import job_stream
from ledger.persistence.engine import libpq_dsn, make_engine
from ledger.persistence.notify_listener import JobListener
from ledger.persistence.sql_store import SqlStore
from tests.factories import accepted, started, succeeded

pytestmark = pytest.mark.postgres
TIMEOUT_S = 20.0


async def until(check: object, what: str) -> None:
    async def wait() -> None:
        while not check():  # type: ignore[operator]
            await asyncio.sleep(0.01)

    try:
        await asyncio.wait_for(wait(), TIMEOUT_S)
    except TimeoutError:
        raise AssertionError(f"timed out waiting for {what}") from None


def test_every_commit_is_heard_and_a_cut_connection_is_replaced(pg_database: str) -> None:
    heard: list[tuple[list[str], set[str]]] = []
    connects: list[int] = []
    with SqlStore(make_engine(pg_database)) as store:
        dsn = libpq_dsn(store.engine)

        def append(job_id: str, *events: object, version: int) -> None:
            store.append(job_stream(job_id), list(events), version)  # type: ignore[arg-type]

        async def scenario() -> None:
            listener = JobListener(
                dsn, lambda ids, ended: heard.append((ids, set(ended))), lambda: connects.append(1)
            )
            task = asyncio.create_task(listener.run())
            try:
                await until(listener.connected.is_set, "LISTEN")
                first = str(uuid.uuid4())
                # Three commits in a row, as an agent's call makes: each heard, in order.
                await asyncio.to_thread(append, first, accepted(), version=0)
                await asyncio.to_thread(append, first, started(), version=1)
                await asyncio.to_thread(append, first, succeeded(), version=2)
                await until(lambda: len(heard) == 3, "three notifications")
                assert heard == [([first], set()), ([first], set()), ([first], {first})]

                with psycopg.connect(dsn, autocommit=True) as admin:
                    cut = admin.execute(
                        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                        "WHERE query LIKE 'LISTEN %' AND pid <> pg_backend_pid()"
                        " AND datname = current_database()"
                    ).fetchall()
                assert cut == [(True,)]
                await until(lambda: len(connects) == 2, "the reconnect")
                await until(listener.connected.is_set, "LISTEN again")
                second = str(uuid.uuid4())
                await asyncio.to_thread(append, second, accepted(), version=0)
                await until(lambda: len(heard) == 4, "a notification after the reconnect")
                assert heard[-1] == ([second], set())
            finally:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task

        asyncio.run(scenario())

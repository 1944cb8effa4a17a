"""The GET's job reads on the event loop (Postgres): the same answers as the store's threaded
`read_job`, a revoked token seen at once, and a connection the server cut is never reused;
the next read gets a fresh one."""

from __future__ import annotations

import asyncio
import uuid

import psycopg
import pytest

from ledger.errors import LedgerError
from ledger.events import job_stream
from ledger.persistence.engine import make_engine
from ledger.persistence.loop_reads import LoopJobReads
from ledger.persistence.sql_store import SqlStore
from ledger.runtime.ledger import Ledger
from ledger.services.tokens import create, revoke
from tests.factories import accepted, started

pytestmark = pytest.mark.postgres


def test_loop_reads_answer_as_the_threaded_read_and_outlive_a_cut_connection(
    pg_database: str,
) -> None:
    with SqlStore(make_engine(pg_database)) as store:
        job_id = str(uuid.uuid4())
        store.append(job_stream(job_id), [accepted(), started()], 0)
        made = create(Ledger(store), "acme", "agent", None, actor="tests")
        token_id = made.view.token_id
        reads = store.loop_job_reads()
        assert isinstance(reads, LoopJobReads)
        assert SqlStore(make_engine("sqlite://")).loop_job_reads() is None  # threads there

        async def scenario() -> None:
            try:
                for token in (None, token_id):
                    assert await reads.read_job(job_id, token) == store.read_job(job_id, token)
                assert await reads.read_job(str(uuid.uuid4()), token_id) == (None, True)
                revoke(Ledger(store), token_id, actor="tests")
                view, stands = await reads.read_job(job_id, token_id)
                assert view is not None and view.job_id == job_id and not stands

                # Every connection the reads hold is cut by the server.
                with psycopg.connect(pg_database.replace("+psycopg", ""), autocommit=True) as a:
                    a.execute(
                        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                        "WHERE query LIKE 'SELECT (SELECT view::text%' AND pid <> pg_backend_pid()"
                        " AND datname = current_database()"
                    )
                with pytest.raises(LedgerError):  # typed, as every driver error
                    await reads.read_job(job_id)
                view, _ = await reads.read_job(job_id)  # a fresh connection
                assert view == store.read_job(job_id)[0]
            finally:
                await reads.close()

        asyncio.run(scenario())

"""A job's change notification says whether the job ended, so that a request waiting for the
outcome (`?until=terminal`) is not woken, and does not read, when the job merely started."""

from __future__ import annotations

import uuid

import psycopg
import pytest

from api.waiter import JobWaiter
from ledger.events import job_stream
from ledger.persistence.appends import JobAppend
from ledger.persistence.engine import make_engine
from ledger.persistence.notify_listener import hints
from ledger.persistence.projections import JOBS_CHANNEL
from ledger.persistence.sql_store import SqlStore
from ledger.runtime.ledger import Ledger
from tests.factories import accepted, failed, started, succeeded


def test_a_notification_names_the_jobs_and_marks_those_that_ended() -> None:
    assert hints("a,b!,c") == (["a", "b", "c"], {"b"})
    assert hints("") == ([], set())


def test_a_watch_for_the_outcome_wakes_only_for_an_ended_job(memory_ledger: Ledger) -> None:
    waiter = JobWaiter(memory_ledger)
    with (
        waiter.watch("j", until_terminal=True) as outcome,
        waiter.watch("j") as change,
    ):
        waiter.wake(["j"], set())  # it started: a change, not an outcome
        assert change.event.is_set() and not outcome.event.is_set()
        change.event.clear()
        waiter.wake(["j"], {"j"})
        assert change.event.is_set() and outcome.event.is_set()
        outcome.event.clear()
        waiter.wake(["j"])  # a poll, or a reconnect: nothing known of why, so every watch
        assert outcome.event.is_set()


@pytest.mark.postgres
def test_postgres_marks_the_notification_of_a_terminal_append_on_every_write_path(
    pg_database: str,
) -> None:
    """The batch append function and the general append both say which jobs ended."""
    listen_url = pg_database.replace("postgresql+psycopg", "postgresql")
    with (
        SqlStore(make_engine(pg_database)) as store,
        psycopg.connect(listen_url, autocommit=True) as listener,
    ):
        listener.execute(f"LISTEN {JOBS_CHANNEL}")
        fast, general = str(uuid.uuid4()), str(uuid.uuid4())
        view = store.append_jobs([JobAppend(fast, [accepted()], None)])[0].job
        view = store.append_jobs([JobAppend(fast, [started()], view)])[0].job
        store.append_jobs([JobAppend(fast, [succeeded()], view)])
        store.append(job_stream(general), [accepted()], 0)
        store.append(job_stream(general), [started(), failed()], 1)
        payloads = [n.payload for n in listener.notifies(timeout=10, stop_after=5)]
    assert payloads == [fast, fast, f"{fast}!", general, f"{general}!"]

"""The sequencer on Postgres (migration 0014): ledger positions given after commit, in commit
order, dense; a transaction held open delays only its own events; one leader among many bidders,
replaced when it goes; the lag it reports. Everything as the application role."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator

import pytest
from sqlalchemy import text

from ledger.events import job_stream
from ledger.persistence import migrate
from ledger.persistence.appends import NO_STREAM
from ledger.persistence.engine import make_engine
from ledger.persistence.sql_store import SqlStore
from ledger.services.ledger import Ledger
from ledger.services.sequencer import SequencerLoop
from tests.concurrent_writers import accepted_event, wait_until
from tests.factories import open_sql, verify_store

pytestmark = pytest.mark.postgres


@pytest.fixture
def app_store(pg_app_url: str) -> Iterator[SqlStore]:
    with open_sql(pg_app_url) as store:
        yield store


def _append(store: SqlStore, n: int) -> str:
    stream = job_stream(uuid.uuid4())
    store.append(stream, [accepted_event(n)], NO_STREAM)
    return stream


def _waiting(store: SqlStore) -> int:
    state = store.sequencer_state()
    assert state is not None
    return state.waiting


def test_events_wait_unsequenced_until_a_tick_and_then_are_dense_in_commit_order(
    app_store: SqlStore,
) -> None:
    streams = [_append(app_store, n) for n in range(3)]
    state = app_store.sequencer_state()
    assert state is not None and (state.head, state.waiting) == (0, 3)
    assert state.lag_s > 0  # the oldest has waited since it was recorded
    with app_store.reading() as reads:  # a plain read does not sequence
        assert reads.last_position() == 0
    assert app_store.sequence() == 3
    assert app_store.sequence() == 0  # nothing new: a tick writes nothing
    in_order = app_store.read_after(0)
    assert [(e.position, e.stream_id) for e in in_order] == list(enumerate(streams, start=1))
    after = app_store.sequencer_state()
    assert after is not None and (after.head, after.waiting, after.lag_s) == (3, 0, 0.0)
    assert verify_store(app_store).ok


def test_a_transaction_held_open_delays_only_its_own_events(app_store: SqlStore) -> None:
    """Ticks go on while one transaction stays open; its event, written first, takes its place
    after everything that committed before it."""
    with app_store.transaction() as held:
        held_stream = job_stream(uuid.uuid4())
        held.append(held_stream, [accepted_event(0)], NO_STREAM)
        others = []
        for n in range(1, 21):  # twenty ticks, each finding the commit just made
            others.append(_append(app_store, n))
            assert app_store.sequence() == 1
            assert _waiting(app_store) == 0  # the lag does not wait for the open transaction
    assert app_store.sequence() == 1
    in_order = app_store.read_after(0)
    assert [e.stream_id for e in in_order] == [*others, held_stream]
    assert [e.position for e in in_order] == list(range(1, 22))
    assert in_order[-1].stored_position < in_order[0].stored_position  # written first
    assert verify_store(app_store).ok


def test_a_rolled_back_write_leaves_no_hole_in_ledger_order(app_store: SqlStore) -> None:
    _append(app_store, 1)
    with pytest.raises(RuntimeError), app_store.transaction() as tx:
        tx.append(job_stream(uuid.uuid4()), [accepted_event(2)], NO_STREAM)
        raise RuntimeError("roll back")  # burns a write position
    _append(app_store, 3)
    in_order = app_store.read_after(0)
    assert [e.position for e in in_order] == [1, 2]
    assert [e.stored_position for e in in_order] == [1, 3]
    assert verify_store(app_store).ok


def test_one_loop_leads_and_another_takes_over_when_it_stops(pg_app_url: str) -> None:
    with open_sql(pg_app_url) as one, open_sql(pg_app_url) as two:
        first, second = SequencerLoop(Ledger(one)), SequencerLoop(Ledger(two))
        first.start()
        wait_until(lambda: first.leading, 10, "the first loop to lead")
        second.start()
        try:
            _append(one, 1)
            wait_until(lambda: _waiting(one) == 0, 10, "the leader to sequence")
            assert not second.leading
            first.stop()  # its connection, and the lead with it, go
            wait_until(lambda: second.leading, 10, "the second loop to take the lead")
            _append(two, 2)
            wait_until(lambda: _waiting(two) == 0, 10, "the new leader to sequence")
            assert [e.position for e in two.read_after(0)] == [1, 2]
        finally:
            first.stop()
            second.stop()


def test_the_loop_sequences_without_any_reader_asking(pg_app_url: str) -> None:
    with open_sql(pg_app_url) as store:
        loop = SequencerLoop(Ledger(store))
        loop.start()
        try:
            wait_until(lambda: loop.leading, 10, "the loop to lead")
            for n in range(50):
                _append(store, n)
            wait_until(lambda: _waiting(store) == 0, 10, "every event to be sequenced")
            state = store.sequencer_state()
            assert state is not None and state.head == 50
        finally:
            loop.stop()


def test_two_readers_catching_up_at_once_give_each_event_one_place(app_store: SqlStore) -> None:
    for n in range(30):
        _append(app_store, n)
    barrier = threading.Barrier(4)
    answers: list[int] = []

    def catch_up() -> None:
        barrier.wait()
        answers.append(app_store.sequence())

    threads = [threading.Thread(target=catch_up) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert sorted(answers) == [0, 0, 0, 30]  # ticks wait for each other: one gives them all
    assert [e.position for e in app_store.read_after(0)] == list(range(1, 31))


def test_0014_downgrades_to_one_chain_in_write_order_and_back(pg_database: str) -> None:
    """Going back to 0013 links the events the sequencer's writers left unlinked, so the older
    ledger verifies as 0013 reads it; going up again sequences them at their positions."""
    engine = make_engine(pg_database)
    try:
        store = SqlStore(engine)
        for n in range(3):
            _append(store, n)
        migrate.downgrade(engine, "0013")
        with engine.connect() as conn:
            unlinked = conn.execute(text("SELECT count(*) FROM events WHERE ledger_hash IS NULL"))
            assert unlinked.scalar_one() == 0
            triggers = conn.execute(
                text("SELECT count(*) FROM pg_trigger WHERE tgname = 'events_ledger_chain'")
            )
            assert triggers.scalar_one() == 1
        migrate.upgrade(engine)
        assert [e.position for e in store.read_after(0)] == [1, 2, 3]
        assert verify_store(store).ok
    finally:
        engine.dispose()

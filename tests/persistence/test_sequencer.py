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
from ledger.runtime.ledger import Ledger, open_ledger
from ledger.runtime.sequencer import QUIET_AFTER_S, SequencerLoop
from tests.concurrent_writers import accepted_event, wait_until
from tests.factories import open_sql, verify_store
from tests.store_helpers import read_after

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
    in_order = read_after(app_store, 0)
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
    in_order = read_after(app_store, 0)
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
    in_order = read_after(app_store, 0)
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
            assert [e.position for e in read_after(two, 0)] == [1, 2]
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
    assert [e.position for e in read_after(app_store, 0)] == list(range(1, 31))


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
        assert [e.position for e in read_after(store, 0)] == [1, 2, 3]
        assert verify_store(store).ok
    finally:
        engine.dispose()


BULK = """
INSERT INTO events (stream_id, stream_version, event_id, type, data, actor, recorded_at, hash)
SELECT 'job-' || gen_random_uuid(), 1, gen_random_uuid(), 'job.accepted', '{}', 'bench', now(),
       md5(g::text) || md5(g::text)
  FROM generate_series(1, :n) AS g
"""
PLANNER_SETTINGS = "SELECT proconfig FROM pg_proc WHERE proname = 'outcomes_unsequenced'"
PARTITIONS = "SELECT inhrelid::regclass::text FROM pg_inherits WHERE inhparent = 'events'::regclass"
SEQ_SCANS = (
    "SELECT sum(pg_stat_get_xact_numscans(inhrelid)) FROM pg_inherits"
    " WHERE inhparent = 'events'::regclass"
)
UPDATED = "SELECT pg_stat_get_xact_tuples_updated('ledger_sequencer'::regclass)"


def test_a_tick_reads_only_the_events_it_sequences(pg_database: str) -> None:
    """0015: however many events are sequenced already, and however stale the statistics, a
    tick scans none of them (two ranges of the txid index); 0014's scanned them all each tick,
    and so did 0015's first cut, whenever the planner misjudged a range of xid8."""
    engine = make_engine(pg_database)
    try:
        store = SqlStore(engine)
        with engine.connect() as conn:
            # On each partition (0018): a partitioned table keeps no rows, nor settings for them.
            for (partition,) in conn.execute(text(PARTITIONS)).all():
                conn.execute(text(f"ALTER TABLE {partition} SET (autovacuum_enabled = false)"))
            conn.commit()
            for batch in range(400):  # a busy ledger: many transactions, a few events each
                conn.execute(text(BULK), {"n": 50})
                conn.commit()
                if batch == 199:
                    conn.execute(text("ANALYZE events"))  # statistics of half of them
                    conn.commit()
        assert store.sequence() == 20_000
        for n in range(3):
            _append(store, n)
        with engine.begin() as conn:
            before = conn.execute(text(SEQ_SCANS)).scalar_one()
            ticked = conn.execute(text("SELECT outcomes_sequence(true)")).scalar_one()
            after = conn.execute(text(SEQ_SCANS)).scalar_one()
        assert (ticked, after - before) == (3, 0)
        state = store.sequencer_state()  # (the bulk rows' hashes are fake: no verify here)
        assert state is not None and (state.head, state.waiting) == (20_003, 0)
        # What a test cannot stage (bench.throughput's load did: the planner guessed 1,009 of
        # 40,000 events past a tick's snapshot, for 71): whatever it guesses, no scan of all.
        with engine.connect() as conn:
            settings = conn.execute(text(PLANNER_SETTINGS)).scalar_one()
        assert {"enable_seqscan=off", "enable_hashjoin=off", "enable_mergejoin=off"} <= set(
            settings
        )
    finally:
        engine.dispose()


def test_the_newest_migration_runs_the_current_sequence_functions_whole() -> None:
    """The tick's functions live whole in one file; the newest migration that creates them
    runs its own copy, so changing the file without a migration fails here."""
    versions = migrate.SCRIPT_LOCATION / "versions"
    snapshots = sorted(versions.glob("*_outcomes_sequence.sql"))
    current = migrate.SCRIPT_LOCATION / "functions" / "outcomes_sequence.sql"
    assert snapshots and snapshots[-1].read_text() == current.read_text()
    assert snapshots[-1].name[:4] <= max(p.name for p in versions.glob("[0-9]*.py"))[:4]


def test_ticks_insert_their_state_and_rewrite_no_row(pg_database: str) -> None:
    """0015: a tick inserts its state into ledger_ticks and updates nothing (a transaction held
    open would keep every dead version of an updated row, and each tick would walk them); the
    table keeps the last hundred ticks; a downgrade to 0014 goes on from the newest."""
    engine = make_engine(pg_database)
    try:
        store = SqlStore(engine)
        with engine.begin() as conn:
            conn.execute(text(BULK), {"n": 1})
        with engine.begin() as conn:
            before = conn.execute(text(UPDATED)).scalar_one()
            assert conn.execute(text("SELECT outcomes_sequence(true)")).scalar_one() == 1
            assert conn.execute(text(UPDATED)).scalar_one() == before
        for n in range(149):
            _append(store, n)
            assert store.sequence() == 1
        with engine.connect() as conn:
            ticks = conn.execute(text("SELECT min(tick), max(tick) FROM ledger_ticks")).one()
        assert tuple(ticks) == (51, 150)
        state = store.sequencer_state()
        assert state is not None and (state.head, state.ticks, state.waiting) == (150, 150, 0)
        migrate.downgrade(engine, "0014")
        _append(store, 150)
        assert store.sequence() == 1
        migrate.upgrade(engine)
        _append(store, 151)
        assert store.sequence() == 1
        assert [e.position for e in read_after(store, 148)] == [149, 150, 151, 152]
        state = store.sequencer_state()
        assert state is not None and (state.head, state.ticks) == (152, 152)
    finally:
        engine.dispose()


def test_an_idle_leader_ticks_less_often_the_longer_the_ledger_is_quiet(pg_app_url: str) -> None:
    # Ticks 200 a second while events come, 20 for ten seconds after, then 4 (idle CPU); a
    # notification still ends any wait at once.
    with open_ledger(pg_app_url, pool_size=2) as ledger:
        loop = SequencerLoop(ledger, idle_wait_s=0.05, busy_tick_s=0.005, quiet_wait_s=0.25)
        try:
            waits = [loop.empty_wait(s) for s in (0.0, 0.5, 5.0, QUIET_AFTER_S, 3600.0)]
        finally:
            loop.stop()
    assert waits == [0.005, 0.005, 0.05, 0.25, 0.25]

"""0026: the sequencer's tick reads only the partitions its events can be in, and finds them
all the same.

A tick asked every partition's txid index for the transactions it had not yet seen (at 100k
jobs in 33 partitions an idle tick took 4.7 ms, an empty ledger's 0.9). It now keeps a bound
every unsequenced event lies above (migrations/functions/outcomes_sequence.sql says why it
holds). The first test counts the index scans a tick makes on the partitions below the bound;
the others hold writers open across ticks in the orders the bound must survive."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import ExitStack

import pytest
from sqlalchemy import text

from ledger.persistence.appends import AppendStatus, JobAppend
from ledger.persistence.sql_store import SqlStore
from tests.concurrent_writers import wait_until
from tests.factories import accepted
from tests.persistence.test_pruned_lookups import SCANS_BELOW, SIZE, partitioned_store

BOUND = "SELECT unsequenced_above FROM outcomes_sequencer_at()"
ORDERED = "SELECT count(*) FROM ledger_order WHERE event_position = :p"


@pytest.fixture
def store(monkeypatch: pytest.MonkeyPatch) -> Iterator[SqlStore]:
    """Partitions of SIZE positions, six of them written; writers held open beside ticks."""
    with partitioned_store(monkeypatch, "outcomes_tick_bound", pool_size=4) as opened:
        yield opened


def scalar(store: SqlStore, query: str, **params: object) -> int:
    with store.connection() as conn:
        return int(conn.execute(text(query), params).scalar_one())


def decide(store: SqlStore) -> int:
    """One new job's decision, committed: its write position."""
    store.make_partitions(4)
    done = store.append_jobs([JobAppend(str(uuid.uuid4()), [accepted()], None)])[0]
    assert done.status is AppendStatus.OK and done.job is not None
    return done.job.ledger_position


def advanced(store: SqlStore, past: int) -> int:
    """Writes and ticks until the bound is above `past` (the second tick keeps the first
    one's; a snapshot's xmin is the whole server's, so a transaction open in another database,
    another test's, holds the bound back until it ends): the bound."""
    bound = [0]

    def moved() -> bool:
        decide(store)
        store.sequence()
        bound[0] = scalar(store, BOUND)
        return bound[0] > past

    wait_until(moved, 60, f"the tick's bound to pass position {past}")
    return bound[0]


def settled(store: SqlStore) -> None:
    """Everything written so far sequenced, and a bound kept above the grown ledger's first
    four partitions."""
    store.sequence()
    advanced(store, 4 * SIZE)


def test_a_tick_reads_no_partition_below_its_bound(store: SqlStore) -> None:
    settled(store)
    bound = scalar(store, BOUND)
    assert bound > 4 * SIZE  # four partitions lie wholly below it
    position = decide(store)
    with store.transaction() as tx:  # a transaction with no id yet, as the sequencer's
        before = tx.conn.execute(text(SCANS_BELOW), {"below": bound}).scalar_one()
        ticked = tx.conn.execute(text("SELECT outcomes_sequence(true)")).scalar_one()
        after = tx.conn.execute(text(SCANS_BELOW), {"below": bound}).scalar_one()
    assert ticked == 1 and scalar(store, ORDERED, p=position) == 1
    assert after - before == 0


def test_a_writer_holding_an_id_past_the_snapshots_xmax_is_still_found(store: SqlStore) -> None:
    """Writer B takes its id, then A takes a larger one; B commits and a tick runs: A's id is
    then at or past the snapshot's xmax (no larger id has ended) though A is open, with an
    event below every position the tick saw given out. A bound drawn from that xmax would step
    over A's event; the kept one waits for A."""
    settled(store)
    with ExitStack() as held:
        b = held.enter_context(store.transaction())
        b_done = b.append_jobs([JobAppend(str(uuid.uuid4()), [accepted()], None)])[0]
        a_open = ExitStack()
        a = a_open.enter_context(store.transaction())
        a_done = a.append_jobs([JobAppend(str(uuid.uuid4()), [accepted()], None)])[0]
        assert a_done.job is not None and b_done.job is not None
    # B committed (the ExitStack closed it); A is still open.
    try:
        assert store.sequence() == 1  # B's event
        for _ in range(3):  # more ticks, each with a write that ends after A began
            decide(store)
            assert store.sequence() == 1
        assert scalar(store, BOUND) < a_done.job.ledger_position
    finally:
        a_open.close()  # A commits
    assert store.sequence() == 1
    assert scalar(store, ORDERED, p=a_done.job.ledger_position) == 1
    problems = store.order_problems()
    assert problems is not None and problems.unsequenced == []


def test_a_writer_held_open_past_the_kept_ticks_is_still_found(store: SqlStore) -> None:
    """A writer open across more ticks than the hundred kept: the bound stays below its event
    until it commits, and the tick after sequences it."""
    settled(store)
    with ExitStack() as a_open:
        a = a_open.enter_context(store.transaction())
        a_done = a.append_jobs([JobAppend(str(uuid.uuid4()), [accepted()], None)])[0]
        assert a_done.job is not None
        for _ in range(110):
            decide(store)
            assert store.sequence() == 1
        assert scalar(store, BOUND) < a_done.job.ledger_position
    assert store.sequence() == 1
    assert scalar(store, ORDERED, p=a_done.job.ledger_position) == 1
    advanced(store, a_done.job.ledger_position - 1)  # then the bound moves on


def test_a_write_position_is_taken_after_the_transactions_id(store: SqlStore) -> None:
    with store.transaction() as tx:
        default = tx.conn.execute(
            text(
                "SELECT column_default FROM information_schema.columns"
                " WHERE table_name = 'events' AND column_name = 'position'"
            )
        ).scalar_one()
        assert tx.conn.execute(text("SELECT pg_current_xact_id_if_assigned()")).scalar() is None
        tx.conn.execute(text("SELECT outcomes_event_position()"))
        taken = tx.conn.execute(text("SELECT pg_current_xact_id_if_assigned()")).scalar()
    assert default == "outcomes_event_position()"
    assert taken is not None

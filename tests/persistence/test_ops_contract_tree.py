"""The operations contract, the Merkle tree's part (`ledger.persistence.tree_contract`): every
store grows the tree over ledger order as it sequences (Postgres: the sequencer's tick,
migration 0021; SQLite and memory: at write), so the head, the stored subtrees and the
proofs read from them are those of a tree recomputed from the events. Runs on every store
(memory, SQLite, Postgres)."""

from __future__ import annotations

import pytest
from sqlalchemy import text
from sqlalchemy.exc import DBAPIError

from ledger.events import RecordedEvent
from ledger.merkle import EMPTY_ROOT, Frontier, event_leaf_hash
from ledger.merkle_store import consistency_proof, frontier_at, inclusion_proof
from ledger.persistence.appends import NO_STREAM
from ledger.persistence.base import Store
from ledger.persistence.sql_store import SqlStore
from tests.factories import accepted, fresh_job_stream, started, succeeded


def fill(store: Store, jobs: int) -> list[str]:
    streams = []
    for _ in range(jobs):
        stream = fresh_job_stream()
        store.append(stream, [accepted()], NO_STREAM)
        store.append(stream, [started(), succeeded(answer=1)], 1)
        streams.append(stream)
    return streams


def ordered(store: Store) -> list[RecordedEvent]:
    return list(store.iter_events())


def test_an_empty_ledger_has_the_empty_tree(any_store: Store) -> None:
    with any_store.in_order() as reads:
        state = reads.tree_state()
    assert state.tree_size == 0
    assert state.frontier.root() == EMPTY_ROOT
    assert state.last_position is None


def test_the_tree_is_the_ledger_order_hashed(any_store: Store) -> None:
    streams = fill(any_store, 7)  # 21 leaves: a stored level-4 subtree and a partial one
    found = ordered(any_store)
    leaves = [event_leaf_hash(e.hash) for e in found]
    with any_store.in_order() as reads:
        state = reads.tree_state()
        assert state.tree_size == len(found) == 21
        assert state.frontier == Frontier.empty().extend(leaves)
        assert state.last_position == found[-1].position
        assert state.start_position == found[0].position
        for at, event in enumerate(found):
            assert reads.tree_leaf_index(event.position) == at
        assert reads.tree_leaf_index(found[-1].position + 1) is None
        hashes = reads.tree_hashes()
        assert list(hashes.read(0, 0, 21)) == leaves
        assert len(hashes.read(4, 0, 2)) == 1
        head = state.frontier.head()
        for at in (0, 5, 16, 20):
            assert inclusion_proof(hashes, at, 21).verify(leaves[at], head)
        old = Frontier.empty().extend(leaves[:9]).head()
        assert consistency_proof(hashes, 9, 21).verify(old, head)
        assert frontier_at(hashes, 9).head() == old
        positions = reads.stream_ledger_positions(streams[2])
        assert positions == [e.position for e in found if e.stream_id == streams[2]]
        assert reads.stream_ledger_positions("job-nothing") == []
        page = reads.events_in_order(found[3].position, 4)
        assert [e.event_id for e in page] == [e.event_id for e in found[4:8]]


def test_an_undone_write_leaves_the_tree_as_it_was(any_store: Store) -> None:
    fill(any_store, 1)
    with any_store.in_order() as reads:
        before = reads.tree_state()

    class Undo(Exception):
        pass

    with pytest.raises(Undo), any_store.transaction() as tx:
        tx.append(fresh_job_stream(), [accepted()], NO_STREAM)
        raise Undo
    fill(any_store, 1)
    found = ordered(any_store)
    with any_store.in_order() as reads:
        after = reads.tree_state()
        assert after.tree_size == before.tree_size + 3 == len(found)
        assert after.frontier == Frontier.empty().extend(event_leaf_hash(e.hash) for e in found)
        assert reads.tree_leaf_index(found[-1].position) == len(found) - 1


def test_a_job_written_in_one_batch_lands_in_the_tree(any_store: Store) -> None:
    stream = fresh_job_stream()
    with any_store.transaction() as tx:
        tx.append(stream, [accepted()], NO_STREAM)
        tx.append(stream, [started()], 1)
    with any_store.in_order() as reads:
        assert reads.tree_state().tree_size == 2
        assert all(p is not None for p in reads.stream_ledger_positions(stream))


@pytest.mark.parametrize(
    "statement", ["UPDATE merkle_nodes SET idx = idx + 100", "DELETE FROM merkle_nodes"]
)
def test_stored_subtrees_are_append_only(store: SqlStore, statement: str) -> None:
    fill(store, 6)  # 18 leaves: one stored subtree (level 4)
    store.sequence()
    with pytest.raises(DBAPIError), store.engine.begin() as conn:
        conn.execute(text(statement))


def test_sql_stores_keep_no_leaf_and_recompute_it_from_its_event(store: SqlStore) -> None:
    """Levels 4, 8, … only in `merkle_nodes` (a leaf row cost 125 bytes on Postgres): a
    level-0 read is the events' stored hashes, hashed as leaves, by ledger position."""
    fill(store, 90)  # 270 leaves: 16 subtrees of level 4, one of level 8
    found = ordered(store)
    leaves = [event_leaf_hash(e.hash) for e in found]
    with store.engine.connect() as conn:
        levels = dict(
            conn.execute(text("SELECT level, count(*) FROM merkle_nodes GROUP BY level")).all()
        )
    assert levels == {4: 16, 8: 1}
    with store.in_order() as reads:
        hashes = reads.tree_hashes()
        assert list(hashes.read(0, 0, 270)) == leaves
        assert list(hashes.read(0, 256, 300)) == leaves[256:]  # runs past the tree: what is
        assert list(hashes.read(0, 270, 280)) == []
        head = reads.tree_state().frontier.head()
        for at in (0, 15, 16, 255, 256, 269):
            assert inclusion_proof(hashes, at, 270).verify(leaves[at], head)
        assert frontier_at(hashes, 37) == Frontier.empty().extend(leaves[:37])


def test_a_burned_position_leaves_no_hole_in_the_tree(store: SqlStore) -> None:
    """SQLite: a position a write burned (sqlite_sequence moved on) is noted, not a leaf;
    Postgres's ledger positions are dense by construction (the sequencer gives them)."""
    fill(store, 1)
    if store.dialect == "sqlite":
        with store.engine.begin() as conn:
            conn.execute(text("UPDATE sqlite_sequence SET seq = seq + 2 WHERE name = 'events'"))
    fill(store, 1)
    found = ordered(store)
    with store.in_order() as reads:
        state = reads.tree_state()
        assert state.frontier == Frontier.empty().extend(event_leaf_hash(e.hash) for e in found)
        assert state.last_position == found[-1].position
        assert [reads.tree_leaf_index(e.position) for e in found] == list(range(6))
        leaves = [event_leaf_hash(e.hash) for e in found]
        hashes = reads.tree_hashes()  # leaves read across the burned positions
        assert list(hashes.read(0, 0, 6)) == list(hashes.read(0, 0, 3)) + list(hashes.read(0, 3, 6))
        assert list(hashes.read(0, 0, 6)) == leaves
        for at in range(6):
            assert inclusion_proof(hashes, at, 6).verify(leaves[at], state.frontier.head())

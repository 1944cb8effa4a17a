"""The operations contract, the audit's part: `verify --since` and `--sample` on every store
(memory, SQLite, Postgres), at the service: the contract's `events_in_streams` and
`leaf_event`, each touched stream checked once however the pages cut it (streams whose events
straddle pages, streams interleaved), and every leaf proven from its row."""

from __future__ import annotations

import pytest

from ledger.merkle import event_leaf_hash
from ledger.persistence.appends import NO_STREAM
from ledger.persistence.base import Store
from ledger.runtime.ledger import Ledger
from ledger.services import proofs
from ledger.services.verify_proofs import verify_sample, verify_since
from tests.factories import accepted, fresh_job_stream, started, succeeded
from tests.persistence.test_ops_contract_tree import fill, ordered


@pytest.mark.parametrize("page", [3, 7, 2000])
def test_since_checks_each_touched_stream_once(any_store: Store, page: int) -> None:
    ledger = Ledger(any_store)
    fill(any_store, 10)
    head = proofs.head(ledger)
    assert head.head.tree_size == 30
    fill(any_store, 4)  # each stream's three events together
    interleaved = [fresh_job_stream() for _ in range(5)]
    for stream in interleaved:
        any_store.append(stream, [accepted()], NO_STREAM)
    for stream in interleaved:
        any_store.append(stream, [started(), succeeded(answer=2)], 1)
    found = verify_since(ledger, head, page=page)
    assert found.ok, (found.chain.problems, found.read_models.problems)
    assert found.chain.events_checked == 27
    assert found.chain.streams_checked == 9
    assert found.read_models.rows_checked == {"jobs": 9}


def test_events_in_streams_and_leaf_event(any_store: Store) -> None:
    streams = fill(any_store, 3)
    with any_store.in_order() as reads:
        found = reads.events_in_streams([streams[2], streams[0], "job-none"])
        assert [(e.event.stream_id, e.event.stream_version) for e in found] == sorted(
            (s, v) for s in (streams[0], streams[2]) for v in (1, 2, 3)
        )
        assert all(e.sequenced for e in found)
        every = ordered(any_store)
        for leaf, event in enumerate(every):
            at = reads.leaf_event(leaf)
            assert at is not None and at.event_id == event.event_id
            assert event_leaf_hash(at.hash) == event_leaf_hash(event.hash)
        assert reads.leaf_event(len(every)) is None
        assert reads.leaf_event(-1) is None


def test_sample_proves_every_leaf_of_a_small_tree(any_store: Store) -> None:
    ledger = Ledger(any_store)
    fill(any_store, 7)
    found = verify_sample(ledger, 1000, seed=3)
    assert found.ok, found.chain.problems
    assert found.chain.events_checked == 21
    again = verify_sample(ledger, 5, seed=3)
    assert again.chain.events_checked == 5

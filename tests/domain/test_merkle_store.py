"""The Merkle tree in storage: what the appender writes (bytes a leaf, measured), how many reads
a proof costs (counted with an instrumented store, up to the largest tree), and the in-memory
store's rules (append-only, all or nothing)."""

from __future__ import annotations

import hashlib
import math
import random
from collections.abc import Sequence
from dataclasses import dataclass

import pytest

from ledger.errors import ImmutableLedgerError, ProofError, SubtreeMissingError
from ledger.merkle import HASH_SIZE, MAX_TREE_SIZE, Frontier, Subtree, leaf_hash, root_of
from ledger.merkle_store import (
    BLOCK,
    KEY_BYTES,
    STRATUM,
    LeavesFromEvents,
    MemorySubtreeHashes,
    SubtreeHashes,
    append_leaves,
    consistency_proof,
    frontier_at,
    inclusion_proof,
    root_at,
)


@dataclass
class Counting:
    """A store that counts its reads and the hashes they return."""

    inner: SubtreeHashes
    reads: int = 0
    hashes: int = 0
    widest: int = 0

    def read(self, level: int, start: int, stop: int) -> Sequence[bytes]:
        found = self.inner.read(level, start, stop)
        self.reads += 1
        self.hashes += len(found)
        self.widest = max(self.widest, len(found))
        return found


@dataclass
class Made:
    """A stored tree of any size without its leaves: each stored subtree's hash is made up
    from its place. Proofs from it verify nothing; they count reads, and every read must be of
    complete subtrees of a stored level, inside the tree."""

    size: int

    def read(self, level: int, start: int, stop: int) -> Sequence[bytes]:
        assert level % STRATUM == 0 and 0 <= start < stop and stop << level <= self.size
        return [hashlib.sha256(f"{level}/{i}".encode()).digest() for i in range(start, stop)]


def reads_allowed(size: int) -> int:
    """2 reads per 4 levels of the tree: ceil(log2(size)) levels."""
    return 2 * math.ceil((size - 1).bit_length() / STRATUM)


def grown(size: int, seed: int = 0) -> tuple[MemorySubtreeHashes, Frontier, list[bytes]]:
    leaves = [leaf_hash(f"{seed}:{i}".encode()) for i in range(size)]
    store = MemorySubtreeHashes()
    return store, store.append(Frontier.empty(), leaves), leaves


# --- what is stored ---------------------------------------------------------------------------


def test_a_leaf_costs_under_64_bytes_stored() -> None:
    store = MemorySubtreeHashes()
    frontier = Frontier.empty()
    rng = random.Random(44)
    figures = []
    for checkpoint in (1, 15, 16, 17, 255, 4096, 65_536, 100_003):
        while frontier.size < checkpoint:  # batches of varied sizes, as a sequencer gives
            batch = min(rng.randrange(1, 300), checkpoint - frontier.size)
            start = frontier.size
            frontier = store.append(
                frontier, [leaf_hash(b"%d" % i) for i in range(start, start + batch)]
            )
        hashes = sum(len(row) for row in store.levels.values())
        # Every complete subtree at levels 0, 4, 8, …: n + n // 16 + n // 256 + … hashes.
        assert hashes == sum(checkpoint >> level for level in range(0, 64, STRATUM))
        per_leaf = store.stored_bytes() / checkpoint
        figures.append(per_leaf)
        assert per_leaf <= 64
        assert hashes * HASH_SIZE / checkpoint < 32 * 16 / 15  # 34.13 bytes of hashes
    assert store.tree_size == 100_003 and sorted(store.levels) == [0, 4, 8, 12, 16]
    # With its 10-byte key each: 44.8 bytes a leaf in a large tree (42 bytes times 16/15).
    assert figures[-1] == pytest.approx((32 + KEY_BYTES) * 16 / 15, abs=0.01)
    assert frontier.root() == root_at(store, 100_003)


def test_the_appender_emits_each_complete_subtree_of_a_stored_level_once() -> None:
    leaves = [leaf_hash(b"%d" % i) for i in range(600)]
    everything = Frontier.empty().grow(leaves)[1]
    frontier, written = Frontier.empty(), []
    for at in range(0, 600, 37):
        growth = append_leaves(frontier, leaves[at : at + 37])
        assert growth.frontier.root() == root_of(leaves[: at + 37])
        frontier = growth.frontier
        written.extend(growth.to_store)
    assert written == [s for s in everything if s.level % STRATUM == 0]
    assert {s.level for s in written} == {0, 4, 8}
    assert len([s for s in written if s.level == 8]) == 2  # 600 leaves: 2 complete 256s


def test_a_store_without_its_leaves_proves_the_same_reading_them_from_a_callback() -> None:
    """The SQL stores' way: `append_leaves(..., leaves=False)` stores levels 4, 8, … only
    (1/15 hash a leaf), and a level-0 read is served by a callback that recomputes the leaves
    (from the events): every proof and frontier is the same as the full store's."""
    full, frontier, leaves = grown(300)
    upper = MemorySubtreeHashes()
    grown_upper = Frontier.empty()
    for at in range(0, 300, 23):
        growth = append_leaves(grown_upper, leaves[at : at + 23], leaves=False)
        assert all(s.level >= STRATUM for s in growth.to_store)
        upper.write(growth.to_store)
        grown_upper = growth.frontier
    assert grown_upper == frontier and sorted(upper.levels) == [4, 8]
    assert upper.stored_bytes() / 300 < (HASH_SIZE + KEY_BYTES) / 15 + 0.1
    asked: list[tuple[int, int]] = []

    def from_events(start: int, stop: int) -> Sequence[bytes]:
        asked.append((start, stop))
        return leaves[start:stop]

    store = Counting(LeavesFromEvents(upper, from_events))
    head = frontier.head()
    for at in range(300):
        proof = inclusion_proof(store, at, 300)
        assert proof == inclusion_proof(full, at, 300) and proof.verify(leaves[at], head)
    assert all(stop - start <= BLOCK for start, stop in asked)  # one block a read, at most
    for size in (1, 17, 255, 256, 299):
        assert consistency_proof(store, size, 300) == consistency_proof(full, size, 300)
        assert frontier_at(store, size) == frontier_at(full, size)
    # A leaf that is no longer what was appended (its event changed): no proof adds up.
    changed = list(leaves)
    changed[40] = leaf_hash(b"changed")
    tampered = LeavesFromEvents(upper, lambda start, stop: changed[start:stop])
    assert not inclusion_proof(tampered, 40, 300).verify(changed[40], head)
    assert not inclusion_proof(tampered, 41, 300).verify(leaves[41], head)


def test_a_writer_restarts_from_the_stored_frontier() -> None:
    store, frontier, _ = grown(1000)
    for size in (0, 1, 16, 17, 255, 256, 999, 1000):
        assert frontier_at(store, size).root() == root_at(store, size)
    assert frontier_at(store, 1000) == frontier
    more = [leaf_hash(b"more %d" % i) for i in range(50)]
    assert store.append(frontier_at(store, 1000), more) == frontier.extend(more)


# --- reads per proof --------------------------------------------------------------------------


def test_every_proof_of_a_small_tree_reads_at_most_two_blocks_per_four_levels() -> None:
    store, _, _ = grown(130)  # levels 0 and 4 stored; larger trees: the test below
    for n in range(1, 131):
        allowed = reads_allowed(n)
        for m in range(n):
            counted = Counting(store)
            inclusion_proof(counted, m, n)
            assert counted.reads <= allowed and counted.widest <= BLOCK, (m, n)
        for m in range(1, n + 1):
            counted = Counting(store)
            consistency_proof(counted, m, n)
            assert counted.reads <= allowed and counted.widest <= BLOCK, (m, n)


def test_proof_reads_grow_with_log_n_up_to_the_largest_tree() -> None:
    rng = random.Random(53)
    sizes = [2**k + d for k in range(1, 53) for d in (-1, 0, 1)] + [MAX_TREE_SIZE]
    sizes += [rng.randrange(2, MAX_TREE_SIZE) for _ in range(100)]
    most = 0
    for n in sizes:
        allowed = reads_allowed(n)
        for m in {m for m in (0, 1, n // 2, n - 2, n - 1, rng.randrange(n)) if 0 <= m < n}:
            counted = Counting(Made(n))
            inclusion_proof(counted, m, n)
            assert counted.reads <= allowed and counted.widest <= BLOCK, (m, n)
            most = max(most, counted.reads)
        for m in {m for m in (1, 2, n // 2, n - 1, n, rng.randrange(1, n + 1)) if 0 < m <= n}:
            counted = Counting(Made(n))
            consistency_proof(counted, m, n)
            assert counted.reads <= allowed and counted.widest <= BLOCK, (m, n)
            most = max(most, counted.reads)
        counted = Counting(Made(n))
        frontier_at(counted, n)
        assert counted.reads <= math.ceil(n.bit_length() / STRATUM)
    assert reads_allowed(MAX_TREE_SIZE) == 28 and 20 <= most <= 28


def test_a_real_large_tree_proves_within_the_same_reads() -> None:
    store, frontier, leaves = grown(70_000, seed=7)
    rng = random.Random(70)
    for _ in range(200):
        a, b = rng.randrange(1, 70_001), rng.randrange(1, 70_001)
        m, n = min(a, b), max(a, b)
        counted = Counting(store)
        head = frontier_at(counted, n).head()
        assert counted.reads <= math.ceil(n.bit_length() / STRATUM)
        counted = Counting(store)
        proved = inclusion_proof(counted, m - 1, n)
        assert counted.reads <= reads_allowed(n) and counted.hashes <= BLOCK * counted.reads
        assert proved.verify(leaves[m - 1], head)
        counted = Counting(store)
        consistent = consistency_proof(counted, m, n)
        assert counted.reads <= reads_allowed(n) and counted.hashes <= BLOCK * counted.reads
        assert consistent.verify(frontier_at(store, m).head(), head)
    assert frontier_at(store, 70_000) == frontier


# --- the in-memory store ----------------------------------------------------------------------


def test_a_proof_beyond_the_stored_tree_is_refused() -> None:
    store, _, _ = grown(20)
    with pytest.raises(SubtreeMissingError):
        inclusion_proof(store, 3, 21)
    with pytest.raises(SubtreeMissingError):
        consistency_proof(store, 5, 40)
    with pytest.raises(SubtreeMissingError):
        root_at(store, 21)
    with pytest.raises(ProofError):
        inclusion_proof(store, 20, 20)
    with pytest.raises(ProofError):
        consistency_proof(store, 0, 20)
    with pytest.raises(ProofError):
        consistency_proof(store, 21, 20)


def test_the_memory_store_is_append_only_and_writes_all_or_nothing() -> None:
    store, frontier, _ = grown(17)
    before = {level: list(row) for level, row in store.levels.items()}
    growth = append_leaves(frontier, [leaf_hash(b"a"), leaf_hash(b"b")])
    store.write(growth.to_store)
    store.write(growth.to_store)  # a retry: the same hashes, nothing changes
    assert store.tree_size == 19
    with pytest.raises(ImmutableLedgerError):  # another hash where one is stored
        store.write([Subtree(0, 3, leaf_hash(b"forged"))])
    with pytest.raises(SubtreeMissingError):  # a gap
        store.write([Subtree(0, 20, leaf_hash(b"late"))])
    with pytest.raises(ProofError):  # a level that is not stored
        store.write([Subtree(1, 9, leaf_hash(b"x"))])
    with pytest.raises(ImmutableLedgerError):  # nothing of a refused batch is kept
        store.write([Subtree(0, 19, leaf_hash(b"c")), Subtree(0, 0, leaf_hash(b"forged"))])
    assert store.tree_size == 19
    assert store.levels[0][:17] == before[0]

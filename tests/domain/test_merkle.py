"""The Merkle tree over the ledger order (RFC 9162 §2.1): roots, proofs and frontiers held to a
recursion written here straight from the RFC's definitions, for every size to 70 and every
leaf and pair of sizes; the frontier's JSON form and its growth."""

from __future__ import annotations

import hashlib
import random
from datetime import UTC, datetime
from functools import cache

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ledger.chain import event_hash
from ledger.errors import ProofError
from ledger.merkle import (
    EMPTY_ROOT,
    MAX_TREE_SIZE,
    Frontier,
    TreeHead,
    event_leaf_hash,
    leaf_hash,
    node_hash,
    root_of,
)
from ledger.merkle_store import (
    MemorySubtreeHashes,
    consistency_proof,
    frontier_at,
    inclusion_proof,
    root_at,
)
from ledger.merkle_verify import consistency_path_length, inclusion_path_length

# --- RFC 9162 §2.1, as written: D is the list of leaf data, D[k1:k2] a slice of it ----------


def _sha256(data: bytes) -> bytes:
    return hashlib.sha256(data).digest()


def _k(n: int) -> int:
    """The largest power of two smaller than n (n > 1)."""
    k = 1
    while k * 2 < n:
        k *= 2
    return k


@cache
def mth(d: tuple[bytes, ...]) -> bytes:
    """§2.1.1: MTH({}) = SHA-256(), MTH({d0}) = SHA-256(0x00 || d0), and for n > 1
    MTH(D_n) = SHA-256(0x01 || MTH(D[0:k]) || MTH(D[k:n]))."""
    n = len(d)
    if n == 0:
        return _sha256(b"")
    if n == 1:
        return _sha256(b"\x00" + d[0])
    k = _k(n)
    return _sha256(b"\x01" + mth(d[:k]) + mth(d[k:]))


def path(m: int, d: tuple[bytes, ...]) -> list[bytes]:
    """§2.1.3.1: PATH(0, {d0}) = {}; for m < k PATH(m, D_n) = PATH(m, D[0:k]) : MTH(D[k:n]),
    for m >= k PATH(m, D_n) = PATH(m - k, D[k:n]) : MTH(D[0:k])."""
    n = len(d)
    if n == 1:
        return []
    k = _k(n)
    if m < k:
        return [*path(m, d[:k]), mth(d[k:])]
    return [*path(m - k, d[k:]), mth(d[:k])]


def subproof(m: int, d: tuple[bytes, ...], b: bool) -> list[bytes]:
    """§2.1.4.1: SUBPROOF(m, D[m], true) = {}, SUBPROOF(m, D[m], false) = {MTH(D[m])}; for
    m <= k SUBPROOF(m, D_n, b) = SUBPROOF(m, D[0:k], b) : MTH(D[k:n]), for m > k
    SUBPROOF(m, D_n, b) = SUBPROOF(m - k, D[k:n], false) : MTH(D[0:k])."""
    n = len(d)
    if m == n:
        return [] if b else [mth(d)]
    k = _k(n)
    if m <= k:
        return [*subproof(m, d[:k], b), mth(d[k:])]
    return [*subproof(m - k, d[k:], False), mth(d[:k])]


def proof(m: int, d: tuple[bytes, ...]) -> list[bytes]:
    """§2.1.4.1: PROOF(m, D_n) = SUBPROOF(m, D_n, true)."""
    return subproof(m, d, True)


DATA = tuple(f"event {i}".encode() for i in range(70))
LEAVES = [leaf_hash(d) for d in DATA]
SIZES = range(1, len(DATA) + 1)


@pytest.fixture(scope="module")
def stored() -> MemorySubtreeHashes:
    store = MemorySubtreeHashes()
    store.append(Frontier.empty(), LEAVES)
    return store


def test_the_hashes_are_the_rfcs() -> None:
    assert EMPTY_ROOT == mth(()) == _sha256(b"")
    assert EMPTY_ROOT.hex() == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
    assert leaf_hash(b"abc") == _sha256(b"\x00abc") == mth((b"abc",))
    left, right = _sha256(b"l"), _sha256(b"r")
    assert node_hash(left, right) == _sha256(b"\x01" + left + right)
    assert root_of([]) == EMPTY_ROOT == Frontier.empty().root()


def test_an_events_leaf_is_its_hash_as_data() -> None:
    hashed = event_hash(
        event_id="e",
        stream_id="job:1",
        stream_version=1,
        type="job.accepted",
        data={},
        code=None,
        actor="a",
        recorded_at=datetime(2026, 1, 1, tzinfo=UTC),
        prev_hash=None,
    )
    assert event_leaf_hash(hashed) == leaf_hash(bytes.fromhex(hashed))
    with pytest.raises(ProofError):
        event_leaf_hash(hashed.upper())


def test_the_root_of_every_size_is_the_rfcs(stored: MemorySubtreeHashes) -> None:
    frontier = Frontier.empty()
    for n in SIZES:
        frontier = frontier.extend([LEAVES[n - 1]])
        assert frontier.size == n
        assert frontier.root() == mth(DATA[:n]) == root_of(LEAVES[:n]) == root_at(stored, n)
        assert frontier_at(stored, n) == frontier


def test_the_inclusion_proof_of_every_leaf_in_every_size_is_the_rfcs(
    stored: MemorySubtreeHashes,
) -> None:
    for n in SIZES:
        head = TreeHead(n, mth(DATA[:n]))
        exact = MemorySubtreeHashes()  # a store of exactly n leaves: no hash beyond the tree
        exact.append(Frontier.empty(), LEAVES[:n])
        for m in range(n):
            made = inclusion_proof(stored, m, n)
            assert list(made.path) == path(m, DATA[:n]), (m, n)
            assert inclusion_proof(exact, m, n) == made
            assert len(made.path) == inclusion_path_length(m, n)
            assert made.verify(LEAVES[m], head)


def test_the_consistency_proof_of_every_pair_of_sizes_is_the_rfcs(
    stored: MemorySubtreeHashes,
) -> None:
    for n in SIZES:
        new = TreeHead(n, mth(DATA[:n]))
        exact = MemorySubtreeHashes()
        exact.append(Frontier.empty(), LEAVES[:n])
        for m in range(1, n + 1):
            made = consistency_proof(stored, m, n)
            assert list(made.path) == proof(m, DATA[:n]), (m, n)
            assert consistency_proof(exact, m, n) == made
            assert len(made.path) == consistency_path_length(m, n)
            assert made.verify(TreeHead(m, mth(DATA[:m])), new)


def test_proofs_above_the_stored_levels_are_the_rfcs() -> None:
    # 1100 leaves: levels 0, 4 and 8 are stored, the proofs' upper hashes (levels 9 and 10,
    # and right edges) are hashed up from level 8.
    data = tuple(f"leaf {i}".encode() for i in range(1100))
    store = MemorySubtreeHashes()
    frontier = store.append(Frontier.empty(), [leaf_hash(d) for d in data])
    assert frontier.root() == mth(data) and sorted(store.levels) == [0, 4, 8]
    rng = random.Random(9162)
    pairs = [(rng.randrange(1, 1101), rng.randrange(1, 1101)) for _ in range(150)]
    pairs += [(1024, 1100), (1023, 1100), (1, 1100), (1099, 1100), (256, 1024), (255, 257)]
    for a, b in pairs:
        m, n = min(a, b), max(a, b)
        assert list(inclusion_proof(store, m - 1, n).path) == path(m - 1, data[:n])
        assert list(consistency_proof(store, m, n).path) == proof(m, data[:n])


# --- the frontier -----------------------------------------------------------------------------


def test_a_frontier_holds_one_subtree_per_bit_of_its_size() -> None:
    frontier = Frontier.empty().extend(LEAVES[:13])  # 13 = 8 + 4 + 1
    assert [(s.level, s.index, s.first_leaf) for s in frontier.subtrees()] == [
        (3, 0, 0),
        (2, 2, 8),
        (0, 12, 12),
    ]
    assert [s.hash for s in frontier.subtrees()] == [
        mth(DATA[0:8]),
        mth(DATA[8:12]),
        mth(DATA[12:13]),
    ]


def test_growing_completes_every_perfect_subtree_once_in_order() -> None:
    frontier, completed = Frontier.empty().grow(LEAVES)
    assert frontier.root() == mth(DATA)
    assert len(completed) == 2 * len(LEAVES) - len(LEAVES).bit_count()
    seen = {(s.level, s.index) for s in completed}
    assert len(seen) == len(completed)
    for subtree in completed:
        assert subtree.hash == mth(DATA[subtree.first_leaf : subtree.first_leaf + subtree.leaves])
    for level in {s.level for s in completed}:
        along = [s.index for s in completed if s.level == level]
        assert along == list(range(len(along)))


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.binary(max_size=6), max_size=120),
    st.lists(st.binary(max_size=6), max_size=120),
)
def test_a_frontier_read_back_from_json_extends_as_the_original(
    before: list[bytes], after: list[bytes]
) -> None:
    frontier = Frontier.empty().extend(leaf_hash(d) for d in before)
    doc = orjson.loads(orjson.dumps(frontier.to_json()))
    read = Frontier.from_json(doc)
    assert read == frontier
    assert doc["root_hash"] == mth(tuple(before)).hex()
    later = [leaf_hash(d) for d in after]
    assert read.extend(later) == frontier.extend(later)
    assert read.extend(later).root() == mth(tuple(before + after))
    # In one batch or leaf by leaf, the same tree.
    stepped = read
    for one in later:
        stepped = stepped.extend([one])
    assert stepped == frontier.extend(later)


@given(st.integers(0, MAX_TREE_SIZE), st.randoms(use_true_random=False))
def test_a_frontier_of_any_size_round_trips_through_json(size: int, rng: random.Random) -> None:
    hashes = tuple(rng.randbytes(32) for _ in range(size.bit_count()))
    frontier = Frontier(size, hashes)
    assert Frontier.from_json(orjson.loads(orjson.dumps(frontier.to_json()))) == frontier


def test_a_frontier_is_under_4_kb_at_any_size() -> None:
    # The largest frontier: 53 hashes, every bit of the largest size set.
    frontier = Frontier(MAX_TREE_SIZE, tuple(bytes([i]) * 32 for i in range(53)))
    assert len(orjson.dumps(frontier.to_json())) == 3673
    # Written with an indentation of two, as the digest files are, too.
    assert len(orjson.dumps(frontier.to_json(), option=orjson.OPT_INDENT_2)) == 3954


def test_a_frontier_document_that_is_not_one_is_refused() -> None:
    good = Frontier.empty().extend(LEAVES[:11]).to_json()  # 11 = 8 + 2 + 1: three hashes

    def variant(**change: object) -> dict[str, object]:
        return {**good, **change}

    bad_docs: list[object] = [
        None,
        [good],
        {k: v for k, v in good.items() if k != "root_hash"},
        variant(extra=1),
        variant(tree_size=12),  # two bits: not three hashes
        variant(tree_size=-1),
        variant(tree_size=True),
        variant(tree_size=11.0),
        variant(tree_size=MAX_TREE_SIZE + 1),
        variant(frontier=good["frontier"][:2]),
        variant(frontier=",".join(good["frontier"])),
        variant(frontier=[good["frontier"][0].upper(), *good["frontier"][1:]]),
        variant(frontier=[good["frontier"][0][:62], *good["frontier"][1:]]),
        variant(frontier=[" " + good["frontier"][0][1:], *good["frontier"][1:]]),
        variant(frontier=list(reversed(good["frontier"]))),  # adds up to another root
        variant(root_hash=EMPTY_ROOT.hex()),
        variant(root_hash=None),
    ]
    for doc in bad_docs:
        with pytest.raises(ProofError):
            Frontier.from_json(doc)
    assert Frontier.from_json(good).size == 11


def test_a_frontier_refuses_what_is_not_a_leaf_hash() -> None:
    with pytest.raises(ProofError):
        Frontier.empty().extend([b"short"])
    with pytest.raises(ProofError):
        Frontier.empty().extend(["ab" * 32])  # type: ignore[list-item]
    with pytest.raises(ProofError):
        Frontier(MAX_TREE_SIZE, tuple(bytes(32) for _ in range(53))).extend([bytes(32)])
    with pytest.raises(ProofError):
        Frontier(3, (bytes(32),))


def test_a_stranger_checks_a_later_root_from_an_earlier_frontier() -> None:
    # Digest A saw 23 leaves; digest B 61. With A's frontier and the leaves between, anyone
    # recomputes B's root without the first 23 leaves.
    earlier = Frontier.empty().extend(LEAVES[:23]).to_json()
    later = Frontier.from_json(earlier).extend(LEAVES[23:61])
    assert later.root() == mth(DATA[:61])
    assert TreeHead.from_json(later.head().to_json()) == TreeHead(61, mth(DATA[:61]))

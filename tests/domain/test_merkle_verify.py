"""What a stranger runs on a Merkle proof: a changed byte anywhere (proof, leaf, root) or a
changed size or index is refused, over random trees; a proof that is not one raises
`ProofError`, never verifies."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ledger.errors import LedgerError, ProofError
from ledger.merkle import EMPTY_ROOT, MAX_TREE_SIZE, Frontier, TreeHead, leaf_hash
from ledger.merkle_store import MemorySubtreeHashes, consistency_proof, inclusion_proof
from ledger.merkle_verify import (
    ConsistencyProof,
    InclusionProof,
    verify_consistency,
    verify_inclusion,
)


def refused(check: Callable[[], bool]) -> bool:
    """A verification refuses by answering False or by raising ProofError: never True."""
    try:
        return check() is False
    except ProofError:
        return True


def flip(value: bytes, bit: int) -> bytes:
    at = bit % (len(value) * 8)
    changed = bytearray(value)
    changed[at // 8] ^= 1 << (at % 8)
    return bytes(changed)


def tree(size: int, seed: int) -> tuple[list[bytes], MemorySubtreeHashes, list[TreeHead]]:
    """Leaves, their stored tree and the head of every size 0..size."""
    leaves = [leaf_hash(f"{seed}/{i}".encode()) for i in range(size)]
    store = MemorySubtreeHashes()
    frontier = Frontier.empty()
    heads = [frontier.head()]
    for one in leaves:
        frontier = store.append(frontier, [one])
        heads.append(frontier.head())
    return leaves, store, heads


@settings(max_examples=150, deadline=None)
@given(st.integers(1, 200), st.integers(0, 2**32), st.data())
def test_a_changed_byte_index_or_size_fails_an_inclusion_proof(
    size: int, seed: int, data: st.DataObject
) -> None:
    leaves, store, heads = tree(size, seed)
    n = data.draw(st.integers(1, size), label="n")
    m = data.draw(st.integers(0, n - 1), label="m")
    made = inclusion_proof(store, m, n)
    head, leaf = heads[n], leaves[m]
    assert made.verify(leaf, head)
    assert verify_inclusion(leaf, m, n, made.path, head.root_hash)

    bit = data.draw(st.integers(0, 255), label="bit")
    assert refused(lambda: made.verify(flip(leaf, bit), head))
    assert refused(lambda: made.verify(leaf, TreeHead(n, flip(head.root_hash, bit))))
    if made.path:
        at = data.draw(st.integers(0, len(made.path) - 1), label="at")
        path = list(made.path)
        path[at] = flip(path[at], bit)
        assert refused(lambda: InclusionProof(m, n, tuple(path)).verify(leaf, head))
        assert refused(lambda: verify_inclusion(leaf, m, n, path, head.root_hash))
        assert refused(lambda: InclusionProof(m, n, made.path[:-1]).verify(leaf, head))
    assert refused(lambda: InclusionProof(m, n, (*made.path, leaf)).verify(leaf, head))

    other = data.draw(st.integers(0, n - 1).filter(lambda i: i != m) if n > 1 else st.just(m))
    if other != m:  # another leaf's place, with this leaf's path
        assert refused(lambda: InclusionProof(other, n, made.path).verify(leaf, head))
        assert refused(lambda: verify_inclusion(leaf, other, n, made.path, head.root_hash))
    resized = data.draw(st.integers(m + 1, size + 5), label="resized")
    if resized != n:  # the proof claims another size than the trusted head's
        assert refused(lambda: InclusionProof(m, resized, made.path).verify(leaf, head))
        if resized <= size:  # the true head of that size: this proof, relabelled or not
            assert refused(lambda: made.verify(leaf, heads[resized]))
            relabelled = InclusionProof
            assert refused(lambda: relabelled(m, resized, made.path).verify(leaf, heads[resized]))


@settings(max_examples=150, deadline=None)
@given(st.integers(1, 200), st.integers(0, 2**32), st.data())
def test_a_changed_byte_or_size_fails_a_consistency_proof(
    size: int, seed: int, data: st.DataObject
) -> None:
    _, store, heads = tree(size, seed)
    n = data.draw(st.integers(1, size), label="n")
    m = data.draw(st.integers(1, n), label="m")
    made = consistency_proof(store, m, n)
    old, new = heads[m], heads[n]
    assert made.verify(old, new)
    assert verify_consistency(m, n, old.root_hash, new.root_hash, made.path)

    bit = data.draw(st.integers(0, 255), label="bit")
    assert refused(lambda: made.verify(TreeHead(m, flip(old.root_hash, bit)), new))
    assert refused(lambda: made.verify(old, TreeHead(n, flip(new.root_hash, bit))))
    if made.path:
        at = data.draw(st.integers(0, len(made.path) - 1), label="at")
        path = list(made.path)
        path[at] = flip(path[at], bit)
        assert refused(lambda: ConsistencyProof(m, n, tuple(path)).verify(old, new))
        assert refused(lambda: verify_consistency(m, n, old.root_hash, new.root_hash, path))
        assert refused(lambda: ConsistencyProof(m, n, made.path[:-1]).verify(old, new))
    assert refused(lambda: ConsistencyProof(m, n, (*made.path, new.root_hash)).verify(old, new))
    assert refused(lambda: ConsistencyProof(m, n, (old.root_hash, *made.path)).verify(old, new))

    first = data.draw(st.integers(1, size), label="first")
    second = data.draw(st.integers(1, size), label="second")
    if (first, second) != (m, n):  # other sizes with this proof, against their own heads
        assert refused(lambda: ConsistencyProof(first, second, made.path).verify(old, new))
        assert refused(lambda: made.verify(heads[first], heads[second]))
        if first < second:  # their own true heads, this proof relabelled
            relabelled = ConsistencyProof
            assert refused(
                lambda: relabelled(first, second, made.path).verify(heads[first], heads[second])
            )


def test_the_root_does_not_say_the_size_so_the_head_carries_it() -> None:
    # RFC 9162's roots do not commit to the tree's size: leaf 0's path in the tree of 5 is,
    # hash for hash, a path in a tree of 8, and adds up to the same root. A proof counts only
    # against a head whose size is the proof's.
    leaves, store, heads = tree(8, 1)
    made = inclusion_proof(store, 0, 5)
    assert verify_inclusion(leaves[0], 0, 8, made.path, heads[5].root_hash)
    assert not made.verify(leaves[0], TreeHead(8, heads[5].root_hash))
    assert not InclusionProof(0, 8, made.path).verify(leaves[0], heads[5])


def test_equal_sizes_are_consistent_with_an_empty_path_and_equal_roots() -> None:
    _, _, heads = tree(5, 2)
    same = ConsistencyProof(5, 5, ())
    assert same.verify(heads[5], heads[5])
    assert not same.verify(heads[5], TreeHead(5, EMPTY_ROOT))
    assert verify_consistency(5, 5, heads[5].root_hash, heads[5].root_hash, [])
    with pytest.raises(ProofError):
        ConsistencyProof(5, 5, (heads[5].root_hash,))


HASH = leaf_hash(b"x")


@pytest.mark.parametrize(
    ("leaf_index", "tree_size", "path"),
    [
        (0, 0, ()),  # the empty tree holds no leaf
        (1, 1, ()),  # index outside the tree
        (5, 3, (HASH, HASH)),
        (-1, 3, (HASH, HASH)),
        (True, 3, (HASH, HASH)),  # a bool is no index
        (0, 3.0, (HASH, HASH)),
        (0, MAX_TREE_SIZE + 1, ()),
        (0, 3, (HASH,)),  # one hash short
        (0, 3, (HASH, HASH, HASH)),  # one too many
        (0, 1, (HASH,)),
        (0, 3, (HASH, HASH[:31])),  # a hash of 31 bytes
        (0, 3, (HASH, HASH + b"\0")),
        (0, 3, (HASH, HASH.hex())),  # hex where bytes belong
        (0, 3, [HASH, HASH]),  # a list where a tuple belongs
    ],
)
def test_an_inclusion_proof_that_is_not_one_raises(
    leaf_index: object, tree_size: object, path: object
) -> None:
    with pytest.raises(ProofError):
        InclusionProof(leaf_index, tree_size, path)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("first", "second", "path"),
    [
        (0, 0, ()),  # RFC 9162: 0 < first
        (0, 4, ()),
        (1, 0, ()),
        (5, 4, (HASH,)),  # first > second
        (True, 4, (HASH, HASH)),
        (2, 4, ()),  # an empty path for sizes that differ
        (2, 4, (HASH, HASH)),
        (3, 4, (HASH, HASH)),
        (3, 4, (HASH, HASH, HASH, HASH)),
        (3, 4, (HASH, HASH, HASH[:-1])),
        (1, MAX_TREE_SIZE + 1, ()),
    ],
)
def test_a_consistency_proof_that_is_not_one_raises(
    first: object, second: object, path: object
) -> None:
    with pytest.raises(ProofError):
        ConsistencyProof(first, second, path)  # type: ignore[arg-type]


def test_hashes_given_to_the_verifiers_are_checked() -> None:
    leaves, store, heads = tree(6, 3)
    made = inclusion_proof(store, 2, 6)
    with pytest.raises(ProofError):
        made.verify(leaves[2][:16], heads[6])
    with pytest.raises(ProofError):
        made.verify(leaves[2].hex(), heads[6])  # type: ignore[arg-type]
    with pytest.raises(ProofError):
        verify_inclusion(leaves[2], 2, 6, made.path, heads[6].root_hash + b"\0")
    with pytest.raises(ProofError):
        verify_inclusion(leaves[2], 2, 6, b"".join(made.path), heads[6].root_hash)
    with pytest.raises(ProofError):
        TreeHead(6, heads[6].root_hash.hex())  # type: ignore[arg-type]
    with pytest.raises(ProofError):
        made.verify(leaves[2], heads[6].root_hash)  # type: ignore[arg-type]
    with pytest.raises(ProofError):
        consistency_proof(store, 2, 6).verify(heads[2], (6, heads[6].root_hash))  # type: ignore[arg-type]
    with pytest.raises(ProofError):
        verify_consistency(2, 6, b"", heads[6].root_hash, consistency_proof(store, 2, 6).path)


def test_proofs_round_trip_through_json_and_refuse_what_is_not_one() -> None:
    _, store, _ = tree(11, 4)
    inclusion = inclusion_proof(store, 9, 11)
    consistency = consistency_proof(store, 6, 11)
    assert InclusionProof.from_json(inclusion.to_json()) == inclusion
    assert ConsistencyProof.from_json(consistency.to_json()) == consistency
    assert set(inclusion.to_json()) == {"leaf_index", "tree_size", "inclusion_path"}
    assert set(consistency.to_json()) == {"tree_size_1", "tree_size_2", "consistency_path"}

    good = inclusion.to_json()
    path = good["inclusion_path"]
    for doc in [
        None,
        {**good, "extra": 1},
        {k: v for k, v in good.items() if k != "tree_size"},
        {**good, "tree_size": "11"},
        {**good, "leaf_index": 11},
        {**good, "inclusion_path": ",".join(path)},
        {**good, "inclusion_path": [path[0].upper(), *path[1:]]},
        {**good, "inclusion_path": ["zz" * 32, *path[1:]]},
        {**good, "inclusion_path": [path[0][:-2], *path[1:]]},
        {**good, "inclusion_path": [path[0] + "00", *path[1:]]},
        {**good, "inclusion_path": [None, *path[1:]]},
        {**good, "inclusion_path": path[:-1]},
    ]:
        with pytest.raises(ProofError):
            InclusionProof.from_json(doc)
    shifted = {**consistency.to_json(), "tree_size_1": 12}
    with pytest.raises(ProofError):
        ConsistencyProof.from_json(shifted)
    assert issubclass(ProofError, LedgerError)

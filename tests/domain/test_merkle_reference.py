"""Our Merkle tree against implementations that are not ours.

- pymerkle 7 (PyPI, a dev extra): an RFC 9162 tree of its own. Its hashing is RFC 9162's only
  with its second-preimage defence on (`disable_security=False`, the default), which prefixes
  leaves with 0x00 and nodes with 0x01; its empty tree is SHA-256 of nothing. Its inclusion
  path is the leaf's hash followed by the RFC's audit path. Its consistency path has another
  shape than the RFC's (it reaches down to a leaf where the RFC stops at the old tree's
  subtrees), so ours is held to it hash by hash: every hash of our proof is pymerkle's root of
  the leaf range the RFC names for it, and our proofs verify against pymerkle's roots.
- The Certificate Transparency reference vectors (RFC 6962's leaves "", 00, 10, 2021, …; the
  roots of sizes 1..8 and the inclusion and consistency proofs that the C++ log and
  transparency-dev/merkle's proof/verify_test.go test against).
"""

from __future__ import annotations

import random

import pytest
from pymerkle import InmemoryTree
from pymerkle import verify_consistency as pymerkle_verify_consistency
from pymerkle import verify_inclusion as pymerkle_verify_inclusion

from ledger.merkle import EMPTY_ROOT, Frontier, TreeHead, leaf_hash, node_hash
from ledger.merkle_store import (
    MemorySubtreeHashes,
    consistency_proof,
    inclusion_proof,
    root_at,
)
from ledger.merkle_verify import ConsistencyProof, InclusionProof


def pymerkle_tree(data: list[bytes]) -> InmemoryTree:
    # The defaults: SHA-256, and the prefixes of RFC 9162 (disable_security stays False).
    tree = InmemoryTree(algorithm="sha256")
    for one in data:
        tree.append_entry(one)
    return tree


def rfc_consistency_ranges(m: int, start: int, stop: int, whole: bool) -> list[tuple[int, int]]:
    """The leaf ranges of SUBPROOF(m, D[start:stop], whole) (RFC 9162 §2.1.4.1), recursively."""
    n = stop - start
    if m == n:
        return [] if whole else [(start, stop)]
    k = 1
    while k * 2 < n:
        k *= 2
    if m <= k:
        return [*rfc_consistency_ranges(m, start, start + k, whole), (start + k, stop)]
    return [*rfc_consistency_ranges(m - k, start + k, stop, False), (start, start + k)]


DATA = [f"outcome {i}".encode() for i in range(70)]
LEAVES = [leaf_hash(d) for d in DATA]


@pytest.fixture(scope="module")
def ours() -> MemorySubtreeHashes:
    store = MemorySubtreeHashes()
    store.append(Frontier.empty(), LEAVES)
    return store


@pytest.fixture(scope="module")
def theirs() -> InmemoryTree:
    return pymerkle_tree(DATA)


def test_pymerkle_hashes_as_rfc_9162(theirs: InmemoryTree) -> None:
    assert theirs.security and theirs.algorithm == "sha256"
    assert theirs.hash_buff(b"abc") == leaf_hash(b"abc")
    left, right = leaf_hash(b"l"), leaf_hash(b"r")
    assert theirs.hash_pair(left, right) == node_hash(left, right)
    assert theirs.get_root(0) == EMPTY_ROOT
    assert theirs.get_leaf(1) == LEAVES[0]
    # Without its defence it would not be RFC 9162: no prefixes.
    bare = InmemoryTree(algorithm="sha256", disable_security=True)
    assert bare.hash_buff(b"abc") != leaf_hash(b"abc")


def test_roots_of_every_size_agree_with_pymerkle(
    ours: MemorySubtreeHashes, theirs: InmemoryTree
) -> None:
    frontier = Frontier.empty()
    for n in range(1, len(DATA) + 1):
        frontier = frontier.extend([LEAVES[n - 1]])
        assert frontier.root() == theirs.get_root(n) == root_at(ours, n), n


def test_inclusion_proofs_of_every_leaf_agree_with_pymerkle(
    ours: MemorySubtreeHashes, theirs: InmemoryTree
) -> None:
    for n in range(1, len(DATA) + 1):
        head = TreeHead(n, theirs.get_root(n))
        for m in range(n):
            their_proof = theirs.prove_inclusion(m + 1, n)  # pymerkle counts leaves from 1
            pymerkle_verify_inclusion(LEAVES[m], head.root_hash, their_proof)
            made = inclusion_proof(ours, m, n)
            assert their_proof.path[0] == LEAVES[m]
            assert list(made.path) == their_proof.path[1:], (m, n)
            assert InclusionProof(m, n, tuple(their_proof.path[1:])).verify(LEAVES[m], head)


def test_consistency_proofs_of_every_pair_agree_with_pymerkle(
    ours: MemorySubtreeHashes, theirs: InmemoryTree
) -> None:
    # pymerkle's root of the leaves [a, b): a tree of its own over leaves a.. at size b - a.
    from_start = [pymerkle_tree(DATA[a:]) for a in range(len(DATA))]
    for n in range(1, len(DATA) + 1):
        new = TreeHead(n, theirs.get_root(n))
        for m in range(1, n + 1):
            old = TreeHead(m, theirs.get_root(m))
            pymerkle_verify_consistency(
                old.root_hash, new.root_hash, theirs.prove_consistency(m, n)
            )
            made = consistency_proof(ours, m, n)
            ranges = rfc_consistency_ranges(m, 0, n, True)
            assert list(made.path) == [from_start[a].get_root(b - a) for a, b in ranges], (m, n)
            assert made.verify(old, new)


def test_a_larger_tree_agrees_with_pymerkle_on_samples() -> None:
    data = [f"job {i}".encode() for i in range(5000)]
    theirs = pymerkle_tree(data)
    ours = MemorySubtreeHashes()
    leaves = [leaf_hash(d) for d in data]
    frontier = ours.append(Frontier.empty(), leaves)
    assert frontier.root() == theirs.get_root()
    rng = random.Random(6962)
    for _ in range(120):
        a, b = rng.randrange(1, 5001), rng.randrange(1, 5001)
        m, n = min(a, b), max(a, b)
        new = TreeHead(n, theirs.get_root(n))
        assert root_at(ours, n) == new.root_hash
        assert list(inclusion_proof(ours, m - 1, n).path) == theirs.prove_inclusion(m, n).path[1:]
        assert consistency_proof(ours, m, n).verify(TreeHead(m, theirs.get_root(m)), new)


# --- Certificate Transparency's reference vectors ---------------------------------------------
# transparency-dev/merkle, proof/verify_test.go (from the C++ log's merkle_tree_test.cc):
# leaf indices there count from 1.

CT_LEAVES = [
    bytes.fromhex(h)
    for h in (
        "",
        "00",
        "10",
        "2021",
        "3031",
        "40414243",
        "5051525354555657",
        "606162636465666768696a6b6c6d6e6f",
    )
]
CT_ROOTS = [
    "6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d",
    "fac54203e7cc696cf0dfcb42c92a1d9dbaf70ad9e621f4bd8d98662f00e3c125",
    "aeb6bcfe274b70a14fb067a5e5578264db0fa9b51af5e0ba159158f329e06e77",
    "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7",
    "4e3bbb1f7b478dcfe71fb631631519a3bca12c9aefca1612bfce4c13a86264d4",
    "76e67dadbcdf1e10e1b74ddc608abd2f98dfb16fbce75277b5232a127f2087ef",
    "ddb89be403809e325750d3d263cd78929c2942b7942a34b77e122c9594a74c8c",
    "5dc9da79a70659a9ad559cb701ded9a2ab9d823aad2f4960cfe370eff4604328",
]
CT_INCLUSION = [  # (leaf, counted from 1; tree size; path)
    (1, 1, []),
    (
        1,
        8,
        [
            "96a296d224f285c67bee93c30f8a309157f0daa35dc5b87e410b78630a09cfc7",
            "5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e",
            "6b47aaf29ee3c2af9af889bc1fb9254dabd31177f16232dd6aab035ca39bf6e4",
        ],
    ),
    (
        6,
        8,
        [
            "bc1a0643b12e4d2d7c77918f44e0f4f79a838b6cf9ec5b5c283e1f4d88599e6b",
            "ca854ea128ed050b41b35ffc1b87b8eb2bde461e9e3b5596ece6b9d5975a0ae0",
            "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7",
        ],
    ),
    (3, 3, ["fac54203e7cc696cf0dfcb42c92a1d9dbaf70ad9e621f4bd8d98662f00e3c125"]),
    (
        2,
        5,
        [
            "6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d",
            "5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e",
            "bc1a0643b12e4d2d7c77918f44e0f4f79a838b6cf9ec5b5c283e1f4d88599e6b",
        ],
    ),
]
CT_CONSISTENCY = [  # (size 1, size 2, path)
    (1, 1, []),
    (
        1,
        8,
        [
            "96a296d224f285c67bee93c30f8a309157f0daa35dc5b87e410b78630a09cfc7",
            "5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e",
            "6b47aaf29ee3c2af9af889bc1fb9254dabd31177f16232dd6aab035ca39bf6e4",
        ],
    ),
    (
        6,
        8,
        [
            "0ebc5d3437fbe2db158b9f126a1d118e308181031d0a949f8dededebc558ef6a",
            "ca854ea128ed050b41b35ffc1b87b8eb2bde461e9e3b5596ece6b9d5975a0ae0",
            "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7",
        ],
    ),
    (
        2,
        5,
        [
            "5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e",
            "bc1a0643b12e4d2d7c77918f44e0f4f79a838b6cf9ec5b5c283e1f4d88599e6b",
        ],
    ),
    (
        6,
        7,
        [
            "0ebc5d3437fbe2db158b9f126a1d118e308181031d0a949f8dededebc558ef6a",
            "b08693ec2e721597130641e8211e7eedccb4c26413963eee6c1e2ed16ffb1a5f",
            "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7",
        ],
    ),
]


@pytest.fixture(scope="module")
def ct() -> MemorySubtreeHashes:
    store = MemorySubtreeHashes()
    store.append(Frontier.empty(), [leaf_hash(d) for d in CT_LEAVES])
    return store


def test_the_reference_roots(ct: MemorySubtreeHashes) -> None:
    assert EMPTY_ROOT.hex() == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
    assert [root_at(ct, n).hex() for n in range(1, 9)] == CT_ROOTS
    assert [pymerkle_tree(CT_LEAVES).get_root(n).hex() for n in range(1, 9)] == CT_ROOTS


@pytest.mark.parametrize(("leaf", "size", "path"), CT_INCLUSION)
def test_the_reference_inclusion_proofs(
    ct: MemorySubtreeHashes, leaf: int, size: int, path: list[str]
) -> None:
    made = inclusion_proof(ct, leaf - 1, size)
    assert [h.hex() for h in made.path] == path
    proof = InclusionProof.from_json(
        {"leaf_index": leaf - 1, "tree_size": size, "inclusion_path": path}
    )
    head = TreeHead(size, bytes.fromhex(CT_ROOTS[size - 1]))
    assert proof.verify(leaf_hash(CT_LEAVES[leaf - 1]), head)


@pytest.mark.parametrize(("first", "second", "path"), CT_CONSISTENCY)
def test_the_reference_consistency_proofs(
    ct: MemorySubtreeHashes, first: int, second: int, path: list[str]
) -> None:
    made = consistency_proof(ct, first, second)
    assert [h.hex() for h in made.path] == path
    proof = ConsistencyProof.from_json(
        {"tree_size_1": first, "tree_size_2": second, "consistency_path": path}
    )
    old = TreeHead(first, bytes.fromhex(CT_ROOTS[first - 1]))
    new = TreeHead(second, bytes.fromhex(CT_ROOTS[second - 1]))
    assert proof.verify(old, new)

"""What a stranger runs to check a Merkle proof (RFC 9162 §2.1.3.2 and §2.1.4.2).

Two proofs, each a value with a JSON form named as in RFC 9162 §4.11 and §4.12:

- `InclusionProof` (`leaf_index`, `tree_size`, `inclusion_path`): the leaf at `leaf_index` is
  in the tree of `tree_size` leaves whose root is given;
- `ConsistencyProof` (`tree_size_1`, `tree_size_2`, `consistency_path`): the tree of
  `tree_size_1` leaves is the first `tree_size_1` leaves of the tree of `tree_size_2`, whose
  roots are given. Equal sizes are consistent with an empty path when the roots are equal;
  size 0 has nothing to prove and is refused, as RFC 9162 asks 0 < first.

A proof is checked against tree heads (`ledger.merkle.TreeHead`: a size and its root, taken
together from a trusted place such as a digest): RFC 9162's root does not commit to the size,
so a proof whose sizes are not the heads' proves nothing and answers False.

Two answers, never more: a proof that is not one (a size out of range or 0, an index outside
its tree, first > second, a path longer or shorter than its sizes call for, a hash that is not
32 bytes, hex that is not 64 lowercase digits, a JSON key missing or unknown) raises
`ProofError`; a well-formed proof answers True if it is of the heads' sizes and its hashes add
up to their roots, and False otherwise. Neither is ever an acceptance by mistake: callers
treat an error as a proof refused.

The hashes are recomputed by the RFC's own bit-by-bit algorithms, not by the recursive layout
that `ledger.merkle_store` builds proofs with: the two meet only in their results (the tests
hold them to each other, to a naive recursion of the RFC's definitions, to pymerkle and to the
Certificate Transparency reference vectors).
"""

from __future__ import annotations

import hmac
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ledger.errors import ProofError
from ledger.merkle import TreeHead, check_hash, check_size, node_hash, parse_hash

_INCLUSION_KEYS = frozenset({"leaf_index", "tree_size", "inclusion_path"})
_CONSISTENCY_KEYS = frozenset({"tree_size_1", "tree_size_2", "consistency_path"})


def inclusion_path_length(leaf_index: int, tree_size: int) -> int:
    """How many hashes prove leaf `leaf_index` in a tree of `tree_size` leaves: one for each
    level where its path and the tree's last leaf's part ways, then one for each perfect
    subtree on the left where they run together."""
    inner = (leaf_index ^ (tree_size - 1)).bit_length()
    return inner + (leaf_index >> inner).bit_count()


def consistency_path_length(first: int, second: int) -> int:
    """How many hashes prove a tree of `first` leaves consistent with one of `second`
    (0 < first <= second): the inclusion path of the old tree's last leaf without the levels
    inside the old tree's last perfect subtree, and that subtree's own hash, unless it is the
    whole old tree (first a power of two)."""
    if first == second:
        return 0
    shift = (first & -first).bit_length() - 1  # the old tree's last perfect subtree's level
    length = inclusion_path_length(first - 1, second) - shift
    return length if first == 1 << shift else length + 1


@dataclass(frozen=True, slots=True)
class InclusionProof:
    """RFC 9162 §2.1.3: the audit path of leaf `leaf_index` in the tree of `tree_size` leaves,
    deepest sibling first. Checked when made: a value of this type is well formed."""

    leaf_index: int
    tree_size: int
    path: tuple[bytes, ...]

    def __post_init__(self) -> None:
        size = check_size(self.tree_size, "tree_size", minimum=1)
        index = check_size(self.leaf_index, "leaf_index")
        if index >= size:
            raise ProofError(f"leaf_index {index} is outside a tree of {size} leaves")
        _check_path(self.path, inclusion_path_length(index, size), "inclusion_path")

    def root_from(self, leaf_hash: bytes) -> bytes:
        """The root this path leads to from `leaf_hash` (RFC 9162 §2.1.3.2, steps 2-4)."""
        fn, sn = self.leaf_index, self.tree_size - 1
        root = check_hash(leaf_hash, "leaf hash")
        for sibling in self.path:
            if sn == 0:  # step 4.1; never with the length checked at construction
                raise ProofError("inclusion_path is longer than its sizes call for")
            if fn & 1 or fn == sn:
                root = node_hash(sibling, root)
                while not fn & 1 and fn != 0:
                    fn, sn = fn >> 1, sn >> 1
            else:
                root = node_hash(root, sibling)
            fn, sn = fn >> 1, sn >> 1
        if sn != 0:  # step 5; never with the length checked at construction
            raise ProofError("inclusion_path is shorter than its sizes call for")
        return root

    def verify(self, leaf_hash: bytes, head: TreeHead) -> bool:
        """True if `leaf_hash` is the leaf at `leaf_index` of the tree of `head`, False if the
        proof is of a tree of another size or its hashes do not add up to the head's root."""
        _check_head(head)
        computed = self.root_from(leaf_hash)
        return hmac.compare_digest(computed, head.root_hash) and head.tree_size == self.tree_size

    def to_json(self) -> dict[str, Any]:
        return {
            "leaf_index": self.leaf_index,
            "tree_size": self.tree_size,
            "inclusion_path": [value.hex() for value in self.path],
        }

    @classmethod
    def from_json(cls, doc: object) -> InclusionProof:
        fields = _fields(doc, _INCLUSION_KEYS, "an inclusion proof")
        path = _hex_path(fields["inclusion_path"], "inclusion_path")
        return cls(fields["leaf_index"], fields["tree_size"], path)


@dataclass(frozen=True, slots=True)
class ConsistencyProof:
    """RFC 9162 §2.1.4: the consistency path from the tree of `first` leaves to the tree of
    `second` leaves (0 < first <= second). Checked when made: a value of it is well formed."""

    first: int
    second: int
    path: tuple[bytes, ...]

    def __post_init__(self) -> None:
        first = check_size(self.first, "tree_size_1", minimum=1)
        second = check_size(self.second, "tree_size_2", minimum=1)
        if first > second:
            raise ProofError(f"tree_size_1 {first} is larger than tree_size_2 {second}")
        _check_path(self.path, consistency_path_length(first, second), "consistency_path")

    def verify(self, old: TreeHead, new: TreeHead) -> bool:
        """True if the tree of `old` is where the tree of `new` began; False if the proof is
        between other sizes or its hashes do not add up to the heads' roots."""
        _check_head(old)
        _check_head(new)
        if (old.tree_size, new.tree_size) != (self.first, self.second):
            return False
        return self._roots_match(old.root_hash, new.root_hash)

    def _roots_match(self, first_root: bytes, second_root: bytes) -> bool:
        """RFC 9162 §2.1.4.2 (step 1, an empty path, is the length checked when made)."""
        first_hash = check_hash(first_root, "first root")
        second_hash = check_hash(second_root, "second root")
        if self.first == self.second:  # an empty path (checked): the same tree twice
            return hmac.compare_digest(first_hash, second_hash)
        path = list(self.path)
        if self.first & (self.first - 1) == 0:  # step 2: a power of two is its own subtree
            path.insert(0, first_hash)
        fn, sn = self.first - 1, self.second - 1
        while fn & 1:  # step 4
            fn, sn = fn >> 1, sn >> 1
        fr = sr = path[0]
        for c in path[1:]:  # step 6
            if sn == 0:  # 6.1; never with the length checked at construction
                return False
            if fn & 1 or fn == sn:
                fr, sr = node_hash(c, fr), node_hash(c, sr)
                while not fn & 1 and fn != 0:
                    fn, sn = fn >> 1, sn >> 1
            else:
                sr = node_hash(sr, c)
            fn, sn = fn >> 1, sn >> 1
        # Step 7 (sn reaches 0 with the length checked at construction).
        matches = hmac.compare_digest(fr, first_hash) & hmac.compare_digest(sr, second_hash)
        return matches and sn == 0

    def to_json(self) -> dict[str, Any]:
        return {
            "tree_size_1": self.first,
            "tree_size_2": self.second,
            "consistency_path": [value.hex() for value in self.path],
        }

    @classmethod
    def from_json(cls, doc: object) -> ConsistencyProof:
        fields = _fields(doc, _CONSISTENCY_KEYS, "a consistency proof")
        path = _hex_path(fields["consistency_path"], "consistency_path")
        return cls(fields["tree_size_1"], fields["tree_size_2"], path)


def verify_inclusion(
    leaf_hash: bytes, leaf_index: int, tree_size: int, path: Sequence[bytes], root_hash: bytes
) -> bool:
    """RFC 9162 §2.1.3.2: is `leaf_hash` leaf `leaf_index` of the tree of `tree_size` leaves
    whose root is `root_hash` (a size and root taken together from a trusted place)? Raises
    `ProofError` if the proof is not one."""
    head = TreeHead(tree_size, check_hash(root_hash, "root hash"))
    return InclusionProof(leaf_index, tree_size, _tuple(path)).verify(leaf_hash, head)


def verify_consistency(
    first: int, second: int, first_root: bytes, second_root: bytes, path: Sequence[bytes]
) -> bool:
    """RFC 9162 §2.1.4.2: does the tree of `second` leaves whose root is `second_root` begin
    with the tree of `first` leaves whose root is `first_root`? Raises `ProofError` if the
    proof is not one."""
    return ConsistencyProof(first, second, _tuple(path))._roots_match(first_root, second_root)


def _tuple(path: Sequence[bytes]) -> tuple[bytes, ...]:
    if isinstance(path, (str, bytes)) or not isinstance(path, Sequence):
        raise ProofError("a proof's path is a sequence of hashes")
    return tuple(path)


def _check_head(head: object) -> None:
    if not isinstance(head, TreeHead):
        raise ProofError("a proof is checked against a TreeHead (a size and its root)")


def _check_path(path: object, expected: int, what: str) -> None:
    if not isinstance(path, tuple):
        raise ProofError(f"{what} is not a tuple of hashes")
    if len(path) != expected:
        raise ProofError(f"{what} holds {len(path)} hashes where these sizes call for {expected}")
    for at, value in enumerate(path):
        check_hash(value, f"{what}[{at}]")


def _fields(doc: object, keys: frozenset[str], what: str) -> dict[str, Any]:
    if not isinstance(doc, dict) or set(doc) != keys:
        raise ProofError(f"{what} is an object of exactly {sorted(keys)}")
    return doc


def _hex_path(value: object, what: str) -> tuple[bytes, ...]:
    if not isinstance(value, list):
        raise ProofError(f"{what} is not a list of hashes")
    return tuple(parse_hash(item, f"{what}[{at}]") for at, item in enumerate(value))

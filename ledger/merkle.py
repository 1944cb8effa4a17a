"""Merkle trees over the ledger order: Certificate Transparency v2's hashing (RFC 9162 §2.1).

The tree's leaves are the events in ledger order, the first event leaf 0. Each tree size n has
one root, the Merkle Tree Hash MTH(D[0:n]) of RFC 9162 §2.1.1:

- the empty tree: SHA-256 of the empty string (`EMPTY_ROOT`);
- a leaf: SHA-256(0x00 || leaf data) (`leaf_hash`);
- more: split at k, the largest power of two smaller than n, and hash
  SHA-256(0x01 || MTH(D[0:k]) || MTH(D[k:n])) (`node_hash`).

The two prefixes keep a leaf from passing for an inner node (a second preimage). An event's
leaf data is the 32 bytes of its `hash` (`event_leaf_hash`): that hash already covers the
event's identity, content and place in its stream (`ledger.chain.event_hash`), a stranger
recomputes it from an exported event, and the tree itself fixes the order, so the leaf needs
nothing more.

A `Frontier` (a "compact range" in Trillian's words) is the tree of size n without its inside:
the roots of the perfect subtrees that cover leaves [0, n), largest first, one for each bit set
in n. It gives the root in O(log n), grows by a leaf at a time (amortised one inner hash a
leaf), and is what a digest carries so that anyone holding it can check a later root by
appending the later leaves (`extend`) or recompute nothing but a proof. Its JSON form
(`to_json`) holds the size, the root and at most 53 hashes in hex: under 4 KB at any size.

Sizes stop at 2**53 - 1 (`MAX_TREE_SIZE`): every size and index is then a JSON number that
survives any JSON reader (I-JSON, RFC 7493: JavaScript's exact integers), and a frontier holds
at most 53 hashes. Stored subtrees and proofs from them: `ledger.merkle_store`; what a stranger
runs to check a proof: `ledger.merkle_verify`.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from ledger.errors import ProofError

HASH_SIZE = 32
MAX_TREE_SIZE = 2**53 - 1
EMPTY_ROOT = hashlib.sha256(b"").digest()
LEAF_PREFIX = b"\x00"
NODE_PREFIX = b"\x01"

_HEX_HASH = re.compile(r"[0-9a-f]{64}")
_HEAD_KEYS = frozenset({"tree_size", "root_hash"})
_FRONTIER_KEYS = _HEAD_KEYS | {"frontier"}


def leaf_hash(data: bytes) -> bytes:
    """RFC 9162 §2.1.1: the hash of a leaf, SHA-256(0x00 || data)."""
    return hashlib.sha256(LEAF_PREFIX + data).digest()


def node_hash(left: bytes, right: bytes) -> bytes:
    """RFC 9162 §2.1.1: the hash of an inner node, SHA-256(0x01 || left || right)."""
    return hashlib.sha256(NODE_PREFIX + left + right).digest()


def event_leaf_hash(event_hash: str) -> bytes:
    """The leaf hash of an event: its `hash` (64 lowercase hex digits) as the leaf's data."""
    return leaf_hash(parse_hash(event_hash, "event hash"))


def split_point(n: int) -> int:
    """The largest power of two smaller than n (n >= 2): where RFC 9162 §2.1.1 splits."""
    return 1 << ((n - 1).bit_length() - 1)


# --- checking what comes from outside --------------------------------------------------------


def parse_hash(value: object, what: str = "hash") -> bytes:
    """A hash in its JSON form, exactly 64 lowercase hex digits, as its 32 bytes."""
    if not isinstance(value, str) or not _HEX_HASH.fullmatch(value):
        raise ProofError(f"{what} is not a SHA-256 hash in 64 lowercase hex digits")
    return bytes.fromhex(value)


def check_hash(value: object, what: str = "hash") -> bytes:
    """`value` if it is a hash: bytes, 32 of them."""
    if not isinstance(value, bytes) or len(value) != HASH_SIZE:
        raise ProofError(f"{what} is not a {HASH_SIZE}-byte SHA-256 hash")
    return value


def check_size(value: object, what: str, minimum: int = 0) -> int:
    """`value` if it is an integer from `minimum` to `MAX_TREE_SIZE` (never a bool)."""
    if type(value) is not int:
        raise ProofError(f"{what} is not an integer")
    if not minimum <= value <= MAX_TREE_SIZE:
        raise ProofError(f"{what} {value} is outside {minimum}..{MAX_TREE_SIZE}")
    return value


# --- the tree's pieces ------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Subtree:
    """The perfect subtree at `level` (2**level leaves) and `index` along that level: it covers
    leaves [index * 2**level, (index + 1) * 2**level); level 0 holds the leaves themselves."""

    level: int
    index: int
    hash: bytes

    @property
    def first_leaf(self) -> int:
        return self.index << self.level

    @property
    def leaves(self) -> int:
        return 1 << self.level


@dataclass(frozen=True, slots=True)
class TreeHead:
    """A tree's size and root, together: what a digest keeps and a proof is checked against.

    The root alone does not say the size: RFC 9162's hashes do not commit to it, and a proof
    of leaf 0 in a tree of 5 leaves is, hash for hash, one in a tree of 8 with the same root.
    So a proof names its sizes, and they count only when a head from a trusted place (a digest
    out of the writers' reach, a signed head) names the same size with the root."""

    tree_size: int
    root_hash: bytes

    def __post_init__(self) -> None:
        check_size(self.tree_size, "tree_size")
        check_hash(self.root_hash, "root_hash")

    def to_json(self) -> dict[str, Any]:
        return {"tree_size": self.tree_size, "root_hash": self.root_hash.hex()}

    @classmethod
    def from_json(cls, doc: object) -> TreeHead:
        if not isinstance(doc, dict) or set(doc) != _HEAD_KEYS:
            raise ProofError(f"a tree head is an object of exactly {sorted(_HEAD_KEYS)}")
        return cls(check_size(doc["tree_size"], "tree_size"), parse_hash(doc["root_hash"]))


@dataclass(frozen=True, slots=True)
class Frontier:
    """The roots of the perfect subtrees covering leaves [0, size), largest (leftmost) first:
    one for each bit set in `size`. Immutable; `extend` and `grow` answer a new one."""

    size: int
    hashes: tuple[bytes, ...]

    def __post_init__(self) -> None:
        check_size(self.size, "tree size")
        if not isinstance(self.hashes, tuple):
            raise ProofError("a frontier's hashes are a tuple")
        if len(self.hashes) != self.size.bit_count():
            raise ProofError(
                f"a frontier of size {self.size} holds {self.size.bit_count()} hashes, "
                f"not {len(self.hashes)}"
            )
        for at, value in enumerate(self.hashes):
            check_hash(value, f"frontier hash {at}")

    @classmethod
    def empty(cls) -> Frontier:
        return cls(0, ())

    def root(self) -> bytes:
        """MTH(D[0:size]): the subtrees folded from the right, O(log n) hashes."""
        if not self.hashes:
            return EMPTY_ROOT
        root = self.hashes[-1]
        for left in reversed(self.hashes[:-1]):
            root = node_hash(left, root)
        return root

    def head(self) -> TreeHead:
        return TreeHead(self.size, self.root())

    def subtrees(self) -> list[Subtree]:
        """The frontier's hashes with their places in the tree."""
        found = []
        start = 0
        levels = [level for level in range(self.size.bit_length()) if self.size >> level & 1]
        for level, value in zip(reversed(levels), self.hashes, strict=True):
            found.append(Subtree(level, start >> level, value))
            start += 1 << level
        return found

    def extend(self, leaf_hashes: Iterable[bytes]) -> Frontier:
        """The frontier after appending these leaves (their `leaf_hash`es), in order."""
        return self.grow(leaf_hashes, keep=_none)[0]

    def grow(
        self, leaf_hashes: Iterable[bytes], keep: Callable[[int], bool] | None = None
    ) -> tuple[Frontier, list[Subtree]]:
        """The frontier after appending these leaves, and every perfect subtree they complete
        (each leaf, and each inner node finished by it) whose level `keep` accepts (all, by
        default), in the order they were completed: along a level, by increasing index."""
        stack = list(self.hashes)
        size = self.size
        completed: list[Subtree] = []
        for at, value in enumerate(leaf_hashes):
            check_hash(value, f"leaf hash {at}")
            if size >= MAX_TREE_SIZE:
                raise ProofError(f"a tree holds at most {MAX_TREE_SIZE} leaves")
            if keep is None or keep(0):
                completed.append(Subtree(0, size, value))
            level = 0
            # Each trailing 1 bit of the size is a subtree of that level waiting on its left.
            while size >> level & 1:
                value = node_hash(stack.pop(), value)
                level += 1
                if keep is None or keep(level):
                    completed.append(Subtree(level, size >> level, value))
            stack.append(value)
            size += 1
        return Frontier(size, tuple(stack)), completed

    def to_json(self) -> dict[str, Any]:
        """`{"tree_size", "root_hash", "frontier"}`, hashes in lowercase hex: the head and the
        frontier, so a reader may take the root without adding the frontier up."""
        return self.head().to_json() | {"frontier": [value.hex() for value in self.hashes]}

    @classmethod
    def from_json(cls, doc: object) -> Frontier:
        """The frontier of a `to_json` document, checked: its keys, its size, as many hashes as
        the size has bits set, each in hex, and a `root_hash` that they add up to."""
        if not isinstance(doc, dict) or set(doc) != _FRONTIER_KEYS:
            raise ProofError(f"a frontier is an object of exactly {sorted(_FRONTIER_KEYS)}")
        size = check_size(doc["tree_size"], "tree_size")
        hashes = doc["frontier"]
        if not isinstance(hashes, list):
            raise ProofError("frontier is not a list of hashes")
        stated_root = parse_hash(doc["root_hash"], "root_hash")
        frontier = cls(
            size, tuple(parse_hash(h, f"frontier hash {i}") for i, h in enumerate(hashes))
        )
        if frontier.root() != stated_root:
            raise ProofError("the frontier's hashes do not add up to its root_hash")
        return frontier


def _none(level: int) -> bool:
    return False


def root_of(leaf_hashes: Iterable[bytes]) -> bytes:
    """MTH of these leaves (their `leaf_hash`es): a frontier grown from nothing."""
    return Frontier.empty().extend(leaf_hashes).root()

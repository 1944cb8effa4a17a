"""The ledger's Merkle tree kept in storage, and proofs read from it (RFC 9162 §2.1.3, §2.1.4).

What is stored: the hash of every complete (perfect) subtree whose level is a multiple of
`STRATUM` = 4, that is levels 0 (the leaf hashes), 4 (subtrees of 16 leaves), 8 (256), 12, …
A subtree is complete once its last leaf is appended, and never changes after: the store only
ever appends, one level at a time in index order (`append_leaves` says what, with the new
frontier). Per leaf that is 1 + 1/16 + 1/256 + … < 16/15 hashes: under 34.2 bytes of hashes,
and under 44.8 bytes with a 10-byte key (level, index) for each, against a budget of 64.

Level 0 need not be stored at all: a leaf is SHA-256(0x00 ‖ its event's stored hash), so a
store that can read the events by ledger position recomputes the (at most 16) leaves a proof
reads under one level-4 subtree (`LeavesFromEvents`: a level-0 read served by a callback).
The SQL stores do (`append_leaves(..., leaves=False)`): as Postgres rows with their index a
stored leaf cost 125 bytes (measured at 50k leaves, docs/integrity.md), where levels 4, 8, …
alone cost about 1/15 of that. The memory store keeps its leaves.

Why not every level (RFC 6962 logs such as Trillian's): that is 2 hashes a leaf, 64 bytes
before any key, so the budget leaves nothing for a key. Why not 8 (the tlog "tiles" of Go's
checksum database): 32.1 bytes a leaf saves 2 bytes, and each missing level costs up to 2**7
hashes read and hashed per proof node where 4 costs at most 2**3.

How a proof is read: every hash in an RFC 9162 proof is the MTH of a node of the tree of the
proof's size, either a perfect subtree or one ending at the tree's last leaf, which is the
fold of at most one perfect subtree per level (a frontier of its own, "the right edge"). A
perfect subtree at level l is the level-b subtrees below it, b the stored level at or under l,
at most 2**3 of them, hashed up. All the level-b subtrees a proof needs within one stored
subtree of level b + 4 (a 16-wide block) are fetched by one range read. A proof touches at most
two such blocks per 4 levels (the path's, and the right edge's), so it costs at most
2 * ceil(levels / 4) reads of at most 16 hashes each in a tree of up to 2**levels leaves: 28
reads at most at `MAX_TREE_SIZE`; a frontier (`frontier_at`), one read per 4 levels. The tests
count them with an instrumented store: every proof of the trees up to 130 leaves, samples
up to 2**53 - 1.

The storage port: `SubtreeHashes.read(level, start, stop)`, a range of one stored level, and
`SubtreeHashWriter.write(subtrees)`. `MemorySubtreeHashes` implements both (tests and the
memory store); the SQL stores keep levels 4, 8, … in a table keyed by (level, index) and serve
level 0 from the events (`LeavesFromEvents`). A store may also answer several ranges at once
(`read_spans`): Postgres reads all of a proof's stored levels above the leaves in one statement,
so a proof costs one round trip for them and one for each of its (at most two) blocks of
leaves.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from ledger.errors import ImmutableLedgerError, ProofError, SubtreeMissingError
from ledger.merkle import HASH_SIZE, Frontier, Subtree, check_size, node_hash, split_point
from ledger.merkle_verify import ConsistencyProof, InclusionProof

STRATUM = 4  # levels 0, 4, 8, … are stored
BLOCK = 1 << STRATUM  # the widest read: the stored subtrees under one of the next stored level
KEY_BYTES = 10  # what a key (level: smallint, index: bigint) costs beside each stored hash


def is_stored_level(level: int) -> bool:
    return level % STRATUM == 0


def is_upper_stored_level(level: int) -> bool:
    """A stored level above the leaves (4, 8, …): what a store without its leaves keeps."""
    return level > 0 and level % STRATUM == 0


class SubtreeHashes(Protocol):
    """The stored tree, read."""

    def read(self, level: int, start: int, stop: int) -> Sequence[bytes]:
        """The hashes of the stored subtrees `start` .. `stop - 1` of `level` (a stored level),
        in index order: all of them, or only those stored if the range runs past them."""
        ...


Span = tuple[int, int, int]  # (stored level, start, stop): what one `read` asks


def read_spans(store: SubtreeHashes, spans: Sequence[Span]) -> list[Sequence[bytes]]:
    """Each span as `store.read` answers it, in one go where the store can (`read_spans`: a
    SQL store's one statement for all of a proof's reads instead of one round trip each)."""
    many = getattr(store, "read_spans", None)
    if many is None:
        return [store.read(level, start, stop) for level, start, stop in spans]
    found: list[Sequence[bytes]] = many(spans)
    return found


class SubtreeHashWriter(Protocol):
    """The stored tree, written: `append_leaves`'s `to_store`, with the leaves' own write."""

    def write(self, subtrees: Sequence[Subtree]) -> None:
        """Store these (new ones in index order along each level; one already stored again
        with the same hash is a retry and changes nothing; with another hash, refused)."""
        ...


@dataclass(frozen=True, slots=True)
class Growth:
    """A batch appended: the tree's frontier after it, and what the store must now hold."""

    frontier: Frontier
    to_store: tuple[Subtree, ...]


def append_leaves(frontier: Frontier, leaf_hashes: Iterable[bytes], leaves: bool = True) -> Growth:
    """Append leaves after `frontier` (the tree so far): the new frontier (its `root()` is the
    new root) and the subtrees to store, every leaf (unless `leaves` is False: a store that
    recomputes them from its events) and each completed subtree of a stored level, to be
    written with the leaves (the same transaction)."""
    keep = is_stored_level if leaves else is_upper_stored_level
    grown, completed = frontier.grow(leaf_hashes, keep=keep)
    return Growth(grown, tuple(completed))


LeafReader = Callable[[int, int], Sequence[bytes]]


@dataclass(frozen=True, slots=True)
class LeavesFromEvents:
    """A stored tree without its leaves: levels 4, 8, … read from `upper`, and level 0 (the
    leaf hashes `start` .. `stop - 1`, at most `BLOCK` at a time for a proof) from `leaves`,
    which recomputes them from the events' stored hashes (the same answer as `read`: those
    that exist, in index order, a shorter list if the range runs past them)."""

    upper: SubtreeHashes
    leaves: LeafReader

    def read(self, level: int, start: int, stop: int) -> Sequence[bytes]:
        if level == 0:
            return self.leaves(start, stop)
        return self.upper.read(level, start, stop)

    def read_spans(self, spans: Sequence[Span]) -> list[Sequence[bytes]]:
        """The leaves' spans from the events, the others from `upper` in one go."""
        upper = iter(read_spans(self.upper, [span for span in spans if span[0] != 0]))
        return [
            self.leaves(start, stop) if level == 0 else next(upper) for level, start, stop in spans
        ]


# --- proofs -----------------------------------------------------------------------------------


def inclusion_proof(store: SubtreeHashes, leaf_index: int, tree_size: int) -> InclusionProof:
    """RFC 9162 §2.1.3.1: PATH(leaf_index, D[0:tree_size]), from the stored subtrees."""
    size = check_size(tree_size, "tree_size", minimum=1)
    index = check_size(leaf_index, "leaf_index")
    if index >= size:
        raise ProofError(f"leaf_index {index} is outside a tree of {size} leaves")
    ranges = inclusion_ranges(index, size)
    return InclusionProof(index, size, _range_hashes(store, ranges)[0])


def inclusion_proof_and_leaf(
    store: SubtreeHashes, leaf_index: int, tree_size: int
) -> tuple[InclusionProof, bytes]:
    """`inclusion_proof`, and the stored hash of the leaf itself, read with the proof's own
    leaves (its 16-wide block holds the proof's lowest hashes): no read of its own."""
    size = check_size(tree_size, "tree_size", minimum=1)
    index = check_size(leaf_index, "leaf_index")
    if index >= size:
        raise ProofError(f"leaf_index {index} is outside a tree of {size} leaves")
    hashes, known = _range_hashes(store, inclusion_ranges(index, size), also=[(0, index)])
    return InclusionProof(index, size, hashes), known[0, index]


def consistency_proof(store: SubtreeHashes, first: int, second: int) -> ConsistencyProof:
    """RFC 9162 §2.1.4.1: PROOF(first, D[0:second]), from the stored subtrees (empty for
    equal sizes)."""
    old = check_size(first, "tree_size_1", minimum=1)
    new = check_size(second, "tree_size_2", minimum=1)
    if old > new:
        raise ProofError(f"tree_size_1 {old} is larger than tree_size_2 {new}")
    return ConsistencyProof(old, new, _range_hashes(store, consistency_ranges(old, new))[0])


def root_at(store: SubtreeHashes, tree_size: int) -> bytes:
    """MTH(D[0:tree_size]) of the stored tree, for any size it held."""
    return frontier_at(store, tree_size).root()


def frontier_at(store: SubtreeHashes, tree_size: int) -> Frontier:
    """The frontier of the stored tree at `tree_size` (a writer's starting point after a
    restart, or an old digest's), in O(log n) reads."""
    size = check_size(tree_size, "tree_size")
    pieces = _pieces(0, size)
    known = _fetch(store, pieces)
    return Frontier(size, tuple(known[piece] for piece in pieces))


def inclusion_ranges(leaf_index: int, tree_size: int) -> list[tuple[int, int]]:
    """The leaf ranges [a, b) whose MTHs make PATH(m, D[n]), deepest first (§2.1.3.1)."""
    ranges = []
    start, stop = 0, tree_size
    while stop - start > 1:
        k = split_point(stop - start)
        if leaf_index < start + k:  # PATH(m, D[0:k]) : MTH(D[k:n])
            ranges.append((start + k, stop))
            stop = start + k
        else:  # PATH(m - k, D[k:n]) : MTH(D[0:k])
            ranges.append((start, start + k))
            start += k
    ranges.reverse()
    return ranges


def consistency_ranges(first: int, second: int) -> list[tuple[int, int]]:
    """The leaf ranges whose MTHs make PROOF(m, D[n]) = SUBPROOF(m, D[n], true) (§2.1.4.1)."""
    ranges = []
    start, stop, m, whole = 0, second, first, True
    while m != stop - start:
        k = split_point(stop - start)
        if m <= k:  # SUBPROOF(m, D[0:k], b) : MTH(D[k:n])
            ranges.append((start + k, stop))
            stop = start + k
        else:  # SUBPROOF(m - k, D[k:n], false) : MTH(D[0:k])
            ranges.append((start, start + k))
            start, m, whole = start + k, m - k, False
    if not whole:  # SUBPROOF(m, D[m], false) = {MTH(D[m])}
        ranges.append((start, stop))
    ranges.reverse()
    return ranges


# --- reading ----------------------------------------------------------------------------------

_Piece = tuple[int, int]  # (level, index) of a perfect subtree


def _pieces(start: int, stop: int) -> list[_Piece]:
    """The perfect subtrees that tile [start, stop), largest aligned first: for a node of the
    RFC tree (a perfect subtree, or one that ends at the tree's last leaf), one for each bit
    of its width, largest first, so its MTH is their fold from the right."""
    pieces = []
    while start < stop:
        align = (start & -start).bit_length() - 1 if start else stop.bit_length()
        level = min(align, (stop - start).bit_length() - 1)
        pieces.append((level, start >> level))
        start += 1 << level
    return pieces


def _range_hashes(
    store: SubtreeHashes, ranges: list[tuple[int, int]], also: Iterable[_Piece] = ()
) -> tuple[tuple[bytes, ...], dict[_Piece, bytes]]:
    """The MTH of each range, and every piece read (`also`: these too, in the same reads)."""
    tiled = [_pieces(start, stop) for start, stop in ranges]
    known = _fetch(store, [*(piece for pieces in tiled for piece in pieces), *also])
    hashes = []
    for pieces in tiled:
        value = known[pieces[-1]]
        for piece in reversed(pieces[:-1]):
            value = node_hash(known[piece], value)
        hashes.append(value)
    return tuple(hashes), known


def _fetch(store: SubtreeHashes, pieces: Iterable[_Piece]) -> dict[_Piece, bytes]:
    """The hashes of these perfect subtrees: one read per 16-wide block of a stored level that
    holds what they are made of (all of them in one go where the store can: `read_spans`),
    each subtree hashed up from its stored level."""
    spans: dict[tuple[int, int], list[int]] = {}  # (stored level, block) -> [first, stop)
    wanted = set(pieces)
    for level, index in wanted:
        base = level - level % STRATUM
        first = index << (level - base)
        stop = (index + 1) << (level - base)
        span = spans.setdefault((base, first >> STRATUM), [first, stop])
        span[0], span[1] = min(span[0], first), max(span[1], stop)
    stored: dict[tuple[int, int], bytes] = {}
    asked = [(base, first, stop) for (base, _), (first, stop) in spans.items()]
    for (base, first, stop), found in zip(asked, read_spans(store, asked), strict=True):
        if len(found) != stop - first:
            raise SubtreeMissingError(base, first, stop, len(found))
        stored.update(((base, first + at), value) for at, value in enumerate(found))
    return {piece: _hash_up(stored, piece) for piece in wanted}


def _hash_up(stored: dict[tuple[int, int], bytes], piece: _Piece) -> bytes:
    level, index = piece
    base = level - level % STRATUM
    row = [stored[base, i] for i in range(index << (level - base), (index + 1) << (level - base))]
    while len(row) > 1:
        row = [node_hash(row[i], row[i + 1]) for i in range(0, len(row), 2)]
    return row[0]


# --- in memory --------------------------------------------------------------------------------


@dataclass
class MemorySubtreeHashes:
    """The storage port in a dict, level -> its stored hashes in index order (tests and the
    memory store). `stored_bytes` counts what a store keeps: each hash and its key."""

    levels: dict[int, list[bytes]] = field(default_factory=dict)

    def read(self, level: int, start: int, stop: int) -> Sequence[bytes]:
        return self.levels.get(level, [])[start:stop]

    def write(self, subtrees: Sequence[Subtree]) -> None:
        """All of them or none: each new one next along its level, a retried one the same."""
        new: dict[int, list[bytes]] = {}
        for subtree in subtrees:
            level, index = subtree.level, subtree.index
            if not is_stored_level(level):
                raise ProofError(f"level {level} is not a stored level")
            row, added = self.levels.get(level, []), new.setdefault(level, [])
            held = len(row) + len(added)
            if index == held:
                added.append(subtree.hash)
            elif index > held:
                raise SubtreeMissingError(level, held, index, 0)
            elif (row[index] if index < len(row) else added[index - len(row)]) != subtree.hash:
                raise ImmutableLedgerError(
                    f"subtree {index} of level {level} is stored with another hash: "
                    "the tree is append-only"
                )
        for level, added in new.items():
            self.levels.setdefault(level, []).extend(added)

    def append(self, frontier: Frontier, leaf_hashes: Iterable[bytes]) -> Frontier:
        """Append leaves after `frontier` (this store's tree) and store what they complete."""
        growth = append_leaves(frontier, leaf_hashes)
        self.write(growth.to_store)
        return growth.frontier

    @property
    def tree_size(self) -> int:
        return len(self.levels.get(0, []))

    def stored_bytes(self) -> int:
        return sum(len(row) for row in self.levels.values()) * (HASH_SIZE + KEY_BYTES)

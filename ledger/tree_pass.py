"""`audit verify`'s Merkle tree check, in the ledger-order pass (docs/integrity.md, "Proofs").

`TreeLeaves` is an `OrderCheck`: fed the events in ledger order, it recomputes each leaf from
the event's stored hash (SHA-256(0x00 ‖ hash)), grows a frontier from them (O(log n) hashes:
the only state that grows with the ledger, and only as its logarithm) and, a chunk of leaves
at a time:

- checks every subtree of a stored level (4, 8, 12, …) that the leaves complete against the
  stored node (one range read per level per chunk);
- checks each tree head the store recorded (a tick's size and frontier; the tree's own row)
  when the recomputed tree reaches its size, and at the end that the current head is the tree
  of every leaf.

A full verification starts from the empty tree at the tree's first position; `--since` starts
from a digest's frontier after its position, so only the leaves after it are read. Each
problem is `merkle_mismatch` and names the position (and level and index) where the recomputed
tree first parts from the stored one.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from ledger.chain import Link, Problem, ProblemKind
from ledger.errors import ProofError
from ledger.merkle import HASH_SIZE, Frontier, Subtree, event_leaf_hash, leaf_hash
from ledger.merkle_store import SubtreeHashes, is_upper_stored_level
from ledger.persistence.tree_contract import RecordedHead, TreeState
from ledger.problem_log import ProblemLog

CHUNK = 2048  # leaves hashed before their completed subtrees are compared with the stored


@dataclass
class TreeLeaves:
    """The tree recomputed from the events at positions from `first_position` on (the leaves
    after `start`: the empty tree, or a digest's frontier), checked against the stored nodes
    (`nodes`), the recorded heads (`heads`) and the current head (`state`)."""

    problems: ProblemLog
    state: TreeState
    nodes: SubtreeHashes
    heads: Sequence[RecordedHead]
    start: Frontier = field(default_factory=Frontier.empty)
    first_position: int | None = None  # default: the tree's first position
    frontier: Frontier = field(init=False)
    leaves: int = field(init=False, default=0)  # recomputed after `start`
    _chunk: list[Link] = field(init=False, default_factory=list)
    _heads: list[RecordedHead] = field(init=False)
    _last_head_ok: bool = field(init=False, default=True)
    _last: Link | None = field(init=False, default=None)

    def __post_init__(self) -> None:
        self.frontier = self.start
        if self.first_position is None:
            self.first_position = self.state.start_position
        self._heads = [h for h in self.heads if h.tree_size > self.start.size]
        self._heads.sort(key=lambda h: h.tree_size, reverse=True)  # next one last: pop()

    def see(self, link: Link) -> None:
        if self.first_position is not None and link.position < self.first_position:
            return
        self._chunk.append(link)
        self._last = link
        if len(self._chunk) >= CHUNK:
            self._flush()

    def finish(self) -> None:
        self._flush()
        current = self.state.frontier
        if self._heads and current.size == self.frontier.size:  # a head past the current one
            head = self._heads[-1]
            self._add(
                self._last,
                f"{head.name} records a tree of {head.tree_size} leaves, but the ledger holds "
                f"{self.frontier.size} from the tree's first position",
            )
        self._heads = []
        if current.size != self.frontier.size:
            self._add(
                self._last,
                f"the tree's head holds {current.size} leaves, but the ledger holds "
                f"{self.frontier.size} from the tree's first position: events were "
                + ("removed" if current.size > self.frontier.size else "added around the tree"),
            )
        elif current != self.frontier:
            self._add(
                self._last,
                f"the tree's head (size {current.size}) is not the tree of the events: its "
                "root differs from the one recomputed from the rows",
            )

    # --- a chunk ------------------------------------------------------------------------------

    def _flush(self) -> None:
        chunk, self._chunk = self._chunk, []
        at = 0
        while at < len(chunk):
            size = self.frontier.size
            upto = len(chunk)
            if self._heads:  # stop at the next recorded head's size to compare it
                upto = min(upto, at + self._heads[-1].tree_size - size)
            piece = chunk[at:upto]
            grown, completed = self.frontier.grow(
                (self._leaf(link) for link in piece), keep=is_upper_stored_level
            )
            self._check_nodes(completed, piece, size)
            self.frontier = grown
            self.leaves += len(piece)
            at = upto
            while self._heads and self._heads[-1].tree_size == self.frontier.size:
                self._check_head(self._heads.pop(), piece[-1] if piece else self._last)

    def _leaf(self, link: Link) -> bytes:
        try:
            return event_leaf_hash(link.hash)
        except ProofError:  # not a hash at all: a leaf no stored tree holds
            return leaf_hash(str(link.hash).encode())

    def _check_nodes(self, completed: list[Subtree], piece: list[Link], first_leaf: int) -> None:
        by_level: dict[int, list[Subtree]] = {}
        for subtree in completed:
            by_level.setdefault(subtree.level, []).append(subtree)
        for level, found in by_level.items():
            low, high = found[0].index, found[-1].index + 1
            stored = self.nodes.read(level, low, high)
            for subtree in found:
                last_leaf = subtree.first_leaf + subtree.leaves - 1
                link = piece[last_leaf - first_leaf]
                where = (
                    f"the stored subtree at level {level}, index {subtree.index} (leaves "
                    f"{subtree.first_leaf}..{last_leaf}, up to position {link.position})"
                )
                offset = subtree.index - low
                if offset >= len(stored):
                    self._add(link, f"{where} is missing")
                elif stored[offset] != subtree.hash:
                    self._add(
                        link,
                        f"{where} is not the hash of the events there: an event row or the "
                        "stored node was changed",
                    )

    def _check_head(self, head: RecordedHead, link: Link | None) -> None:
        ok = head.frontier == b"".join(self.frontier.hashes)
        if not ok and self._last_head_ok:  # one problem where they part, not one a tick
            size = self.frontier.size
            stored_bytes = len(head.frontier)
            if stored_bytes != HASH_SIZE * size.bit_count():
                why = f"its frontier is {stored_bytes} bytes, not {HASH_SIZE * size.bit_count()}"
            else:
                why = "its frontier is not the one recomputed from the rows"
            self._add(link, f"{head.name} (tree size {size}) differs: {why}")
        self._last_head_ok = ok

    def _add(self, link: Link | None, message: str) -> None:
        if link is None:
            self.problems.add(Problem(ProblemKind.MERKLE_MISMATCH, "", 0, None, message))
            return
        self.problems.add(
            Problem(
                ProblemKind.MERKLE_MISMATCH,
                link.stream_id,
                link.stream_version,
                link.position,
                f"Merkle tree: {message}",
            )
        )

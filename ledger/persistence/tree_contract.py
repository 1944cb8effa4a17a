"""The store's contract, the Merkle tree's part (docs/integrity.md, "Proofs"): the tree over
ledger order as it stands in this view (its size, frontier and the position of its leaf 0),
its stored subtrees for proofs (`ledger.merkle_store.SubtreeHashes`), and what a proof of a
job needs: the ledger positions of a stream's events, and whole events in ledger order.

Every store grows the tree in the transaction that sequences the events: Postgres in the
sequencer's tick (`outcomes_sequence`), SQLite and memory at each write. Leaf i is the event
at ledger position `start_position + i` (SQL: positions are dense from there); its leaf hash
is `ledger.merkle.event_leaf_hash(event.hash)`.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass

from ledger.events import RecordedEvent
from ledger.merkle import Frontier
from ledger.merkle_store import SubtreeHashes


@dataclass(frozen=True, slots=True)
class TreeState:
    """The tree as a view sees it: `frontier` (its size and root), and the ledger positions of
    its first leaf (`start_position`; before the first event, the position the first will
    take) and of its last (None: an empty tree)."""

    start_position: int
    last_position: int | None
    frontier: Frontier

    @classmethod
    def dense(cls, start_position: int, frontier: Frontier) -> TreeState:
        """A tree whose leaves are the positions from `start_position` on, without a gap."""
        last = start_position + frontier.size - 1 if frontier.size else None
        return cls(start_position, last, frontier)

    @property
    def tree_size(self) -> int:
        return self.frontier.size


@dataclass(frozen=True, slots=True)
class RecordedHead:
    """A tree head the store recorded (Postgres: a tick's row, or what migration 0020 built;
    SQLite: its one row): its size and frontier as stored (32 bytes a hash, largest subtree
    first; unchecked: `audit verify` recomputes and compares them). `name` says where."""

    name: str
    tree_size: int
    frontier: bytes


class TreeReads(ABC):
    @abstractmethod
    def tree_state(self) -> TreeState:
        """The tree over the events this view sees sequenced: O(1), one row."""

    @abstractmethod
    def tree_hashes(self, state: TreeState | None = None) -> SubtreeHashes:
        """The stored subtrees (levels 0, 4, 8, …), read on this view (`state`: this view's
        `tree_state()`, if the caller has it: a store may save a read with it)."""

    @abstractmethod
    def recorded_tree_heads(self) -> list[RecordedHead]:
        """Every tree head the store still holds, by tree size (O(1): Postgres keeps the last
        hundred ticks)."""

    @abstractmethod
    def tree_leaf_index(self, position: int, state: TreeState | None = None) -> int | None:
        """The leaf of the event at this ledger position (None: not in the tree: before its
        start, or not sequenced yet); `state` as for `tree_hashes`."""

    @abstractmethod
    def leaf_event(self, leaf: int) -> RecordedEvent | None:
        """The whole event that is leaf `leaf` of the tree, read from its row (its `position`
        is its ledger position; None: no event there, or not a leaf of the tree)."""

    @abstractmethod
    def stream_ledger_positions(self, stream_id: str) -> list[int | None]:
        """The ledger position of each event of the stream, in version order (None: not
        sequenced yet)."""

    @abstractmethod
    def events_in_order(self, after: int, limit: int) -> list[RecordedEvent]:
        """Whole events after ledger position `after`, in ledger order, at most `limit` (their
        `position` is their ledger position)."""

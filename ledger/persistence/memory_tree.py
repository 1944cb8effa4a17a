"""The Merkle tree's part of the contract over the in-memory state (`tree_contract.py`): the
tree grows at each append, in memory (`ledger.merkle_store.MemorySubtreeHashes`), and an
undone transaction takes its leaves back. Memory positions may skip numbers (an undone
append's are not reused), so the leaf of each position is kept."""

from __future__ import annotations

import bisect
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ledger.events import RecordedEvent
from ledger.merkle import Frontier, event_leaf_hash
from ledger.merkle_store import MemorySubtreeHashes, SubtreeHashes
from ledger.persistence.tree_contract import TreeReads, TreeState

if TYPE_CHECKING:
    from ledger.persistence.memory_state import MemoryState


@dataclass
class MemoryTree:
    hashes: MemorySubtreeHashes = field(default_factory=MemorySubtreeHashes)
    frontier: Frontier = field(default_factory=Frontier.empty)
    positions: list[int] = field(default_factory=list)  # leaf -> ledger position
    leaves: dict[int, int] = field(default_factory=dict)  # ledger position -> leaf

    def grow(self, recorded: Sequence[RecordedEvent]) -> Callable[[], None]:
        """These events are the tree's next leaves; what takes them back."""
        before = self.frontier
        lengths = {level: len(row) for level, row in self.hashes.levels.items()}
        self.frontier = self.hashes.append(before, (event_leaf_hash(e.hash) for e in recorded))
        for event in recorded:
            self.leaves[event.position] = len(self.positions)
            self.positions.append(event.position)

        def undo() -> None:
            self.frontier = before
            for level, row in self.hashes.levels.items():
                del row[lengths.get(level, 0) :]
            for event in recorded:
                self.leaves.pop(event.position, None)
            del self.positions[before.size :]

        return undo


class MemoryTreeReads(TreeReads):
    state: MemoryState

    def tree_state(self) -> TreeState:
        tree = self.state.tree
        if not tree.positions:
            return TreeState(self.state.next_position, None, tree.frontier)
        return TreeState(tree.positions[0], tree.positions[-1], tree.frontier)

    def tree_hashes(self) -> SubtreeHashes:
        return self.state.tree.hashes

    def tree_leaf_index(self, position: int) -> int | None:
        return self.state.tree.leaves.get(position)

    def stream_ledger_positions(self, stream_id: str) -> list[int | None]:
        return [e.position for e in self.state.streams.get(stream_id, [])]

    def events_in_order(self, after: int, limit: int) -> list[RecordedEvent]:
        found = self.state.events
        start = bisect.bisect_right(found, after, key=lambda e: e.position)
        return found[start : start + limit]

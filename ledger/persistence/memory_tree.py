"""The Merkle tree's part of the contract over the in-memory state (`tree_contract.py`): the
tree (`memory_state.MemoryTree`) grows at each append, and an undone transaction takes its
leaves back. Memory positions may skip numbers (an undone append's are not reused), so the
leaf of each position is kept."""

from __future__ import annotations

import bisect

from ledger.events import RecordedEvent
from ledger.merkle_store import SubtreeHashes
from ledger.persistence.memory_state import MemoryState
from ledger.persistence.tree_contract import RecordedHead, TreeReads, TreeState


class MemoryTreeReads(TreeReads):
    state: MemoryState

    def tree_state(self) -> TreeState:
        tree = self.state.tree
        if not tree.positions:
            return TreeState(self.state.next_position, None, tree.frontier)
        return TreeState(tree.positions[0], tree.positions[-1], tree.frontier)

    def tree_hashes(self, state: TreeState | None = None) -> SubtreeHashes:
        return self.state.tree.hashes

    def recorded_tree_heads(self) -> list[RecordedHead]:
        frontier = self.state.tree.frontier
        return [RecordedHead("the tree", frontier.size, b"".join(frontier.hashes))]

    def tree_leaf_index(self, position: int, state: TreeState | None = None) -> int | None:
        return self.state.tree.leaves.get(position)

    def leaf_event(self, leaf: int) -> RecordedEvent | None:
        positions = self.state.tree.positions
        if not 0 <= leaf < len(positions):
            return None
        found = self.state.events
        at = bisect.bisect_left(found, positions[leaf], key=lambda e: e.position)
        return found[at] if at < len(found) and found[at].position == positions[leaf] else None

    def stream_ledger_positions(self, stream_id: str) -> list[int | None]:
        return [e.position for e in self.state.streams.get(stream_id, [])]

    def events_in_order(self, after: int, limit: int) -> list[RecordedEvent]:
        found = self.state.events
        start = bisect.bisect_right(found, after, key=lambda e: e.position)
        return found[start : start + limit]

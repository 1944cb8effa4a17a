"""Full `audit verify` recomputes the Merkle tree from the event rows (ledger.tree_pass): a row's
stored hash changed, a stored subtree changed, a recorded head's frontier changed are each
caught as `merkle_mismatch` naming where; an honest ledger verifies, on every store."""

from __future__ import annotations

import pytest
from sqlalchemy import select, update

from ledger.chain import Link, ProblemKind
from ledger.merkle import Frontier, event_leaf_hash, leaf_hash
from ledger.merkle_store import MemorySubtreeHashes, append_leaves
from ledger.persistence.base import Store
from ledger.persistence.schema import ledger_ticks, ledger_tree, merkle_nodes
from ledger.persistence.tree_contract import RecordedHead, TreeState
from ledger.problem_log import ProblemLog
from ledger.queries import LedgerLink
from ledger.tree_pass import TreeLeaves
from tests.factories import verify_store
from tests.persistence.test_ops_contract_tree import fill
from tests.plugins.tampering import (
    Seeded,
    around_the_triggers,
    chain_problems,
    postgres,
    rehash,
    tree_problems,
)


def _flip(value: bytes, at: int = 0) -> bytes:
    changed = bytearray(value)
    changed[at] ^= 1
    return bytes(changed)


def test_an_honest_ledger_verifies_its_tree(any_store: Store) -> None:
    fill(any_store, 100)  # 300 leaves: level-4 and level-8 subtrees
    report = verify_store(any_store)
    assert report.ok, report.problems


def test_a_row_rehashed_is_caught_by_the_tree(seeded: Seeded) -> None:
    """The stream's last event re-hashed from new content: its stream chain holds, its
    ledger-wide link does not, and the tree recomputed from its hash parts from the stored
    level-4 subtree above it (leaves 0..15) and from the recorded heads."""
    target = seeded.event("charge", 3)  # the ninth event: leaf 8
    rehash(seeded, target, target.data | {"result": {"charge_id": "ch_forged"}})
    report = verify_store(seeded.store)
    kinds = {p.kind for p in chain_problems(report)}
    assert kinds == {ProblemKind.LEDGER_CHAIN_BROKEN}
    found = tree_problems(report)
    assert found and all(p.position is not None for p in found)
    assert min(p.position or 0 for p in found) >= target.position
    assert any("level 4, index 0" in p.message for p in found), found
    assert any("head" in p.message or "tick" in p.message for p in found), found


def test_a_changed_stored_subtree_is_caught(seeded: Seeded) -> None:
    with around_the_triggers(seeded.url) as conn:
        stored = conn.execute(
            select(merkle_nodes.c.hash).where(merkle_nodes.c.level == 4, merkle_nodes.c.idx == 0)
        ).scalar_one()
        conn.execute(
            update(merkle_nodes)
            .where(merkle_nodes.c.level == 4, merkle_nodes.c.idx == 0)
            .values(hash=_flip(bytes(stored)))
        )
    report = verify_store(seeded.store)
    sixteenth = list(seeded.store.iter_events())[15]
    assert not chain_problems(report)
    assert [(p.kind, p.position) for p in report.problems] == [
        (ProblemKind.MERKLE_MISMATCH, sixteenth.position)
    ]
    assert "level 4, index 0 (leaves 0..15" in report.problems[0].message


def test_a_changed_frontier_on_a_recorded_head_is_caught(seeded: Seeded) -> None:
    """Postgres: an older tick's frontier (the newest's is the head proofs are read against);
    SQLite: the tree's one row."""
    with around_the_triggers(seeded.url) as conn:
        if postgres(seeded):
            tick, size, frontier = conn.execute(
                select(ledger_ticks.c.tick, ledger_ticks.c.tree_size, ledger_ticks.c.frontier)
                .where(ledger_ticks.c.tree_size > 3)
                .order_by(ledger_ticks.c.tick)
                .limit(1)
            ).one()
            conn.execute(
                update(ledger_ticks)
                .where(ledger_ticks.c.tick == tick)
                .values(frontier=_flip(bytes(frontier), 5))
            )
            name = f"tick {tick}"
        else:
            size, frontier = conn.execute(
                select(ledger_tree.c.tree_size, ledger_tree.c.frontier)
            ).one()
            conn.execute(update(ledger_tree).values(frontier=_flip(bytes(frontier), 5)))
            name = "the tree's row"
    report = verify_store(seeded.store)
    assert not chain_problems(report)
    found = tree_problems(report)
    at_size = list(seeded.store.iter_events())[size - 1]
    assert found[0].position == at_size.position
    assert f"{name} (tree size {size}) differs" in found[0].message


def _links(count: int, changed: int | None = None) -> list[Link]:
    found: list[Link] = []
    for i in range(count):
        value = leaf_hash(b"%d" % i).hex()
        if i == changed:
            value = leaf_hash(b"changed").hex()
        found.append(LedgerLink(i + 1, f"s-{i}", 1, value, None))
    return found


@pytest.mark.parametrize("chunk", [1, 7, 2048])
def test_the_check_reads_in_chunks_and_stops_at_each_head(
    monkeypatch: pytest.MonkeyPatch, chunk: int
) -> None:
    """The same findings however the leaves are chunked; heads recorded at any size."""
    monkeypatch.setattr("ledger.tree_pass.CHUNK", chunk)
    links = _links(600)
    leaves = [event_leaf_hash(link.hash) for link in links]
    nodes = MemorySubtreeHashes()
    nodes.write(append_leaves(Frontier.empty(), leaves, leaves=False).to_store)
    heads = []
    for size in (1, 16, 17, 256, 300, 600):
        frontier = Frontier.empty().extend(leaves[:size])
        heads.append(RecordedHead(f"tick {size}", size, b"".join(frontier.hashes)))
    state = TreeState.dense(1, Frontier.empty().extend(leaves))

    def run(given: list[Link]) -> ProblemLog:
        problems = ProblemLog()
        check = TreeLeaves(problems, state, nodes, heads)
        for link in given:
            check.see(link)
        check.finish()
        return problems

    assert run(links).total == 0
    found = run(_links(600, changed=200)).problems()
    assert found[0].position == 208  # leaf 207 completes the level-4 subtree of leaf 199
    assert [p.message.split(" (")[0] for p in found][:2] == [
        "Merkle tree: the stored subtree at level 4, index 12",
        "Merkle tree: the stored subtree at level 8, index 0",
    ]
    assert any("tick 256" in p.message for p in found)
    assert not any("tick 300" in p.message for p in found)  # one where they part, not each
    assert "the tree's head (size 600)" in found[-1].message
    short = run(links[:590]).problems()
    assert [p.message for p in short][-1].startswith(
        "Merkle tree: the tree's head holds 600 leaves, but the ledger holds 590"
    )

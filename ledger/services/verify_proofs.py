"""`audit verify` against tree heads, in time that does not grow with the whole ledger
(docs/integrity.md, "Proofs"):

- **`--since HEAD`** (`verify_since`): a tree head kept apart (`audit digest`, `audit head
  --json`) is extended with every event after its position, each leaf recomputed from the
  row's stored hash (`ledger.tree_pass.TreeLeaves` from the head's frontier), and checked
  against the stored subtrees and recorded heads after it and the current head; the current
  tree must extend the head (its root at the head's size, and a consistency proof, O(log n));
  the stream chains and read models of the streams the events after the head touch are
  checked whole (every event of those streams, old ones too: not the other streams). One pass
  over the events since the head in ledger order, a page at a time; each page's streams read
  by their ids (the unique index on stream and version), each stream checked once, on the page
  that holds its first event after the head. Time O(events since) and memory one page.
- **`--sample N`** (`verify_sample`): N leaves drawn uniformly from the current tree, each
  event read from its row and hashed again from its content (a changed row is caught, not
  only a changed stored hash), and its inclusion proof checked against the current head.
- **Tree heads in `--against DIR`** (`check_heads`): each head checked against the current
  tree by its root at the head's size and a consistency proof (O(log n) each), instead of a
  read of the ledger per digest.

What none of them reads: rows before a head's position in streams that no later event touches
(a row changed there is caught by a full verification, or by `--sample` when drawn).
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ledger.chain import Problem, ProblemKind, recomputed_hash
from ledger.clock import now
from ledger.errors import HeadAheadError, ProofError, SubtreeMissingError, TreeHeadError
from ledger.ledger_pass import DensePositions, LedgerChain, LedgerFold, OrderCheck
from ledger.merkle import TreeHead, leaf_hash
from ledger.merkle_store import SubtreeHashes, consistency_proof, frontier_at, inclusion_proof
from ledger.persistence.base import Reads
from ledger.persistence.tree_contract import TreeState
from ledger.problem_log import ProblemLog
from ledger.queries import LedgerLink, StreamEvent
from ledger.read_model_check import ReadModelReport, StreamModels
from ledger.read_models import ReadModel
from ledger.receipts import SignedHead
from ledger.runtime.ledger import Ledger
from ledger.services.verify_passes import PAGE, DigestCheck, Progress, Verification
from ledger.stream_pass import StreamChain, StreamPass
from ledger.tree_pass import TreeLeaves


@dataclass(frozen=True)
class _Start:
    """Where the ledger-order checks pick up: the head's position and the link stored there."""

    position: int
    ledger_hash: str | None


def since_events(ledger: Ledger, head: SignedHead) -> int:
    """How many leaves the tree holds after `head` (a progress bar's length)."""
    with ledger.store.in_order() as reads:
        return max(reads.tree_state().tree_size - head.head.tree_size, 0)


def verify_since(
    ledger: Ledger,
    head: SignedHead,
    models: bool = True,
    progress: Progress | None = None,
    page: int = PAGE,
) -> Verification:
    """Check the ledger from a tree head on (the module's `--since`). Raises `TreeHeadError`
    for a head it cannot start from (`HeadAheadError`: larger than the current tree)."""
    started = now()
    tell = progress or (lambda n: None)
    state = ledger.store.sequencer_state()
    dense_from = state.dense_from if state is not None else None
    base = ledger.store.archive_base()
    with ledger.store.snapshot() as reads:
        tree = reads.tree_state()
        after = _after_head(head, tree)
        if base is not None and after < base.position:
            raise TreeHeadError(
                f"the head (position {after}) is older than the newest archive (which ends at "
                f"position {base.position}): verify the archive's files (--archive DIR) and "
                "the database from a head taken after it"
            )
        problems = ProblemLog()
        hashes = reads.tree_hashes()
        _position_matches(reads, head, tree, problems)
        # The extension itself is the pass below (the head's frontier grown by the rows after
        # it must be the current head); here, the stored tree at the head's size.
        _extends(reads, head, tree, hashes, problems, prove=False)
        stored = reads.ledger_links(after - 1, 1) if after > 0 else []
        at_head = stored[0] if stored and stored[0].position == after else None
        if after > 0 and at_head is None:
            problems.add(_head_problem(head, f"no event holds the head's position {after}"))
        start = _Start(after, at_head.ledger_hash if at_head else None)
        checks: list[OrderCheck] = [
            LedgerChain(problems, start),
            TreeLeaves(
                problems,
                tree,
                hashes,
                reads.recorded_tree_heads(),
                start=head.frontier,
                first_position=after + 1,
            ),
        ]
        if dense_from is not None:
            checks.append(DensePositions(problems, dense_from, start))
        fold = LedgerFold(checks)
        chain = StreamChain(problems)
        counts: dict[str, int] = {}
        folded = StreamModels(_counting_rows(reads, counts), page) if models else None
        touched = StreamPass(chain, None, folded)
        cursor = after
        while links := reads.ledger_links(cursor, page):
            fold.add(links)
            _touched_streams(reads, links, after, touched)
            cursor = links[-1].position
            tell(len(links))
        fold.finish()
        touched.finish()
    read_models = folded.report if folded is not None else ReadModelReport()
    read_models.rows_checked = counts
    report = problems.report(fold.events, chain.streams)
    report.first_position, report.last_position = fold.first_position, fold.last_position
    scope = (
        f"{fold.events} events since the tree head of {head.head.tree_size} leaves (position "
        f"{head.position}) and the {chain.streams} streams they touch verify; the current tree "
        f"({tree.tree_size} leaves) extends the head"
    )
    return Verification(report, read_models, [], started, now(), scope=scope)


def verify_sample(
    ledger: Ledger, count: int, seed: int | None = None, progress: Progress | None = None
) -> Verification:
    """Prove `count` leaves drawn uniformly from the current tree (all of them if it holds
    fewer), each recomputed from its row's content, against the current head."""
    started = now()
    tell = progress or (lambda n: None)
    base = ledger.store.archive_base()
    rng = random.Random(seed)
    problems = ProblemLog()
    with ledger.store.snapshot() as reads:
        tree = reads.tree_state()
        hashes = reads.tree_hashes()
        head = tree.frontier.head()
        low = _first_leaf_kept(reads, base.position) if base is not None else 0
        drawn = range(low, tree.tree_size)
        leaves = sorted(rng.sample(drawn, min(count, len(drawn))))
        for leaf in leaves:
            _prove_leaf(reads, hashes, head, leaf, problems)
            tell(1)
    report = problems.report(len(leaves), 0)
    scope = (
        f"{len(leaves)} leaves drawn from the tree of {head.tree_size}: each event's row makes "
        "its hash and its inclusion proof leads to the current root"
    )
    return Verification(report, ReadModelReport(), [], started, now(), scope=scope)


def check_heads(ledger: Ledger, heads: Sequence[tuple[Path, SignedHead]]) -> list[DigestCheck]:
    """Each tree head (published in `--against DIR`) against the current tree: its size, its
    position, its root at its size and a consistency proof to the current head, O(log n)
    reads each; the ledger itself is not read again."""
    found = []
    base = ledger.store.archive_base()
    with ledger.store.snapshot() as reads:
        tree = reads.tree_state()
        hashes = reads.tree_hashes()
        for path, head in heads:
            log = ProblemLog()
            if head.head.tree_size > tree.tree_size:
                error = HeadAheadError(head.head.tree_size, tree.tree_size)
                log.add(_head_problem(head, str(error)))
            else:
                _position_matches(reads, head, tree, log)
                extended = ProblemLog()
                _extends(reads, head, tree, hashes, extended)
                problems = extended.report(0, 0).problems
                archived = base is not None and (head.position or 0) <= base.position
                if problems and archived and base is not None:
                    # Not necessarily tampering: the leaves its proof reads left with an archive.
                    log.add(
                        _head_problem(
                            head,
                            f"it cannot be proven from the database: it lies within archived "
                            f"history (archive {base.archive_id} ends at position "
                            f"{base.position}), whose leaves are in the archive's files; "
                            "verify them with `audit verify --archive DIR`",
                        )
                    )
                else:
                    log.extend(problems)
            found.append(DigestCheck(path, log.report(0, 0)))
    return found


# --- the head ---------------------------------------------------------------------------------


def _after_head(head: SignedHead, tree: TreeState) -> int:
    """The ledger position after which the leaves the head does not cover begin."""
    size = head.head.tree_size
    if size > tree.tree_size:
        raise HeadAheadError(size, tree.tree_size)
    if size == 0:
        return tree.start_position - 1
    if head.position is None:
        raise TreeHeadError(f"a head of {size} leaves names no position")
    return head.position


def _position_matches(reads: Reads, head: SignedHead, tree: TreeState, log: ProblemLog) -> None:
    size = head.head.tree_size
    if not size:
        return
    if head.position is None:
        log.add(_head_problem(head, f"a head of {size} leaves names no position"))
        return
    leaf = reads.tree_leaf_index(head.position)
    if leaf != size - 1:
        where = "no leaf" if leaf is None else f"leaf {leaf}"
        log.add(
            _head_problem(
                head,
                f"its position {head.position} is {where} of the tree, not leaf {size - 1}: "
                "positions before it were removed or inserted",
            )
        )


def _extends(
    reads: Reads,
    head: SignedHead,
    tree: TreeState,
    hashes: SubtreeHashes,
    log: ProblemLog,
    prove: bool = True,
) -> None:
    """The current tree extends the head: the stored tree at the head's size has its root,
    and (`prove`) a consistency proof from it to the current head adds up (O(log n) stored
    hashes; the leaves a proof needs are recomputed from their rows, as for any proof)."""
    old, new = head.head, tree.frontier.head()
    if not old.tree_size:
        return
    try:
        root = frontier_at(hashes, old.tree_size).root()
        proof = consistency_proof(hashes, old.tree_size, new.tree_size) if prove else None
    except (SubtreeMissingError, ProofError) as exc:
        log.add(_head_problem(head, f"the stored tree cannot prove it: {exc}"))
        return
    if root != old.root_hash:
        log.add(
            _head_problem(
                head,
                f"the ledger's tree of its first {old.tree_size} leaves has another root than "
                "the head's: the history the head covers was changed (or it is another "
                "ledger's head)",
            )
        )
    elif proof is not None and not proof.verify(old, new):
        log.add(
            _head_problem(
                head,
                f"the current tree ({new.tree_size} leaves) does not extend it: the "
                "consistency proof from its stored subtrees (and the rows of the leaves it "
                "reads) does not add up: the tree or an event row after the head was changed",
            )
        )


def _head_problem(head: SignedHead, why: str) -> Problem:
    return Problem(
        ProblemKind.TREE_HEAD_MISMATCH,
        "",
        0,
        head.position,
        f"the tree head of {head.head.tree_size} leaves: {why}",
    )


# --- the events since -------------------------------------------------------------------------


def _touched_streams(
    reads: Reads, links: Sequence[LedgerLink], after: int, touched: StreamPass
) -> None:
    """The streams of this page of events, read whole by their ids; each is checked on the page
    that holds its first event after the head (never twice), in stream order."""
    low, high = links[0].position, links[-1].position
    found = reads.events_in_streams(sorted({link.stream_id for link in links}))
    at = 0
    while at < len(found):
        stream_id = found[at].event.stream_id
        end = at
        while end < len(found) and found[end].event.stream_id == stream_id:
            end += 1
        stream = found[at:end]
        if low <= _first_after(stream, after) <= high:
            touched.add(stream)
        at = end


def _first_after(stream: Sequence[StreamEvent], after: int) -> int:
    placed = (i.event.position for i in stream if i.sequenced and i.event.position > after)
    return min(placed, default=-1)


def _counting_rows(
    reads: Reads, counts: dict[str, int]
) -> Callable[[ReadModel[Any], list[str]], list[dict[str, Any]]]:
    def stored(model: ReadModel[Any], keys: list[str]) -> list[dict[str, Any]]:
        rows = reads.read_model_rows_by_key(model.table, keys)
        counts[model.table] = counts.get(model.table, 0) + len(rows)
        return rows

    return stored


# --- sampled proofs ---------------------------------------------------------------------------


def _first_leaf_kept(reads: Reads, archived_upto: int) -> int:
    """After an archive: the first leaf whose event is still in the database."""
    first = reads.ledger_links(archived_upto, 1)
    leaf = reads.tree_leaf_index(first[0].position) if first else None
    return leaf if leaf is not None else reads.tree_state().tree_size


def _prove_leaf(
    reads: Reads, hashes: SubtreeHashes, head: TreeHead, leaf: int, log: ProblemLog
) -> None:
    event = reads.leaf_event(leaf)
    if event is None:
        message = f"Merkle tree: leaf {leaf} has no event row at its position"
        log.add(Problem(ProblemKind.MERKLE_MISMATCH, "", 0, None, message))
        return
    where = f"{event.stream_id} v{event.stream_version} (leaf {leaf})"
    content_hash = recomputed_hash(event)
    if content_hash != event.hash:
        log.add(
            Problem(
                ProblemKind.HASH_MISMATCH,
                event.stream_id,
                event.stream_version,
                event.position,
                f"{where}: content does not match its hash (edited)",
            )
        )
    try:
        proof = inclusion_proof(hashes, leaf, head.tree_size)
    except (SubtreeMissingError, ProofError) as exc:
        message = f"Merkle tree: {where}: no inclusion proof: {exc}"
        log.add(
            Problem(
                ProblemKind.MERKLE_MISMATCH,
                event.stream_id,
                event.stream_version,
                event.position,
                message,
            )
        )
        return
    if not proof.verify(leaf_hash(bytes.fromhex(content_hash)), head):
        log.add(
            Problem(
                ProblemKind.MERKLE_MISMATCH,
                event.stream_id,
                event.stream_version,
                event.position,
                f"Merkle tree: {where}: the event as its row makes it is not in the tree of "
                f"the current head ({head.tree_size} leaves): the row, or a leaf or stored "
                "subtree on its proof's path, was changed",
            )
        )

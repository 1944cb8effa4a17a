"""The Merkle tree's part of the contract in SQL (`tree_contract.py`), and SQLite's growth at
write. Postgres's sequencer extends the tree in its tick (`outcomes_tree_extend`, migration
0020); its newest tick row holds the size and frontier (`outcomes_tree_at()`). SQLite keeps them
in `ledger_tree`, updated by each write under its write lock (writers are serialized).

`merkle_nodes` holds levels 4, 8, … only: a leaf (level 0) is recomputed from its event's
stored hash, read by ledger position (`SqlLeaves`; docs/integrity.md, "Proofs": a stored leaf
row cost 125 bytes on Postgres).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import Connection, bindparam, func, insert, select, text, update

from ledger.errors import ImmutableLedgerError, SchemaMissingError
from ledger.events import RecordedEvent
from ledger.merkle import HASH_SIZE, Frontier, event_leaf_hash
from ledger.merkle_store import LeavesFromEvents, Span, append_leaves
from ledger.persistence.errors import translated
from ledger.persistence.schema import (
    events,
    ledger_events,
    ledger_order,
    ledger_ticks,
    ledger_tree,
    merkle_gaps,
    merkle_nodes,
)
from ledger.persistence.sql_rows import PAGE, row_to_event, sqlite_has_table
from ledger.persistence.tree_contract import RecordedHead, TreeReads, TreeState

_PG_STATE = text("SELECT t.tree_size, t.frontier, t.start_position FROM outcomes_tree_at() t")
_SQLITE_STATE = select(
    ledger_tree.c.tree_size,
    ledger_tree.c.frontier,
    ledger_tree.c.start_position,
    select(func.coalesce(func.max(merkle_gaps.c.skipped), 0)).scalar_subquery().label("skipped"),
).where(ledger_tree.c.id == 1)
_SKIPPED_AT = (
    select(merkle_gaps.c.skipped)
    .where(merkle_gaps.c.position <= bindparam("position"))
    .order_by(merkle_gaps.c.position.desc())
    .limit(1)
)
_PUT_GAP = insert(merkle_gaps)
_NODES = (
    select(merkle_nodes.c.hash)
    .where(
        merkle_nodes.c.level == bindparam("level"),
        merkle_nodes.c.idx >= bindparam("start"),
        merkle_nodes.c.idx < bindparam("stop"),
    )
    .order_by(merkle_nodes.c.idx)
)
# Each event's place, one index lookup an event (the lowest, should a forger have given it two;
# None: not sequenced yet). A join of the stream's events with `ledger_order` was planned, on a
# freshly filled ledger, as a scan of every order partition: 52 ms a proof at 30k jobs.
_PG_STREAM_POSITIONS = (
    select(
        select(ledger_order.c.position)
        .where(ledger_order.c.event_position == events.c.position)
        .order_by(ledger_order.c.position)
        .limit(1)
        .scalar_subquery()
    )
    .where(events.c.stream_id == bindparam("stream_id"))
    .order_by(events.c.stream_version)
)
_SQLITE_STREAM_POSITIONS = (
    select(events.c.position)
    .where(events.c.stream_id == bindparam("stream_id"))
    .order_by(events.c.stream_version)
)
# Postgres: every range of a proof's stored levels in one statement (`read_spans`), each an
# index range on the key, answered by range (k) in index order.
_PG_SPANS = text(
    "SELECT s.k, n.hash FROM unnest(CAST(:levels AS smallint[]), CAST(:starts AS bigint[]),"
    " CAST(:stops AS bigint[])) WITH ORDINALITY AS s (level, start, stop, k)"
    " CROSS JOIN LATERAL (SELECT m.idx, m.hash FROM merkle_nodes m WHERE m.level = s.level"
    " AND m.idx >= s.start AND m.idx < s.stop) n"
    " ORDER BY s.k, n.idx"
)
_START = select(ledger_tree.c.start_position).where(ledger_tree.c.id == 1)
# SQLite: how many positions were burned before leaf `leaf` (the last gap at or below it).
_SKIPPED_BEFORE_LEAF = (
    select(merkle_gaps.c.skipped)
    .where(merkle_gaps.c.position - bindparam("start") - merkle_gaps.c.skipped <= bindparam("leaf"))
    .order_by(merkle_gaps.c.position.desc())
    .limit(1)
)
# The events from a ledger position on, in ledger order: their position and stored hash.
_HASHES_FROM = (
    select(ledger_events.c.position, ledger_events.c.hash)
    .where(ledger_events.c.position >= bindparam("first"))
    .order_by(ledger_events.c.position)
    .limit(bindparam("limit"))
)
_BUILT_HEAD = select(ledger_tree.c.tree_size, ledger_tree.c.frontier).where(ledger_tree.c.id == 1)
_TICK_HEADS = (
    select(ledger_ticks.c.tick, ledger_ticks.c.tree_size, ledger_ticks.c.frontier)
    .where(ledger_ticks.c.tree_size.is_not(None))
    .order_by(ledger_ticks.c.tick)
)
_PUT_NODES = insert(merkle_nodes)
_PUT_STATE = (
    update(ledger_tree)
    .where(ledger_tree.c.id == 1)
    .values(tree_size=bindparam("size"), frontier=bindparam("frontier"))
)


def frontier_of(size: int, packed: bytes) -> Frontier:
    """A frontier from its stored form: its hashes, 32 bytes each, largest subtree first."""
    packed = bytes(packed)
    hashes = tuple(packed[at : at + HASH_SIZE] for at in range(0, len(packed), HASH_SIZE))
    return Frontier(int(size), hashes)


def read_state(conn: Connection) -> TreeState:
    statement = _PG_STATE if conn.dialect.name == "postgresql" else _SQLITE_STATE
    with translated():
        row = conn.execute(statement).first()
    if row is None:
        raise SchemaMissingError("the ledger has no Merkle tree row: run `outcomes migrate`")
    frontier = frontier_of(row.tree_size, row.frontier)
    start = int(row.start_position)
    if not frontier.size:
        return TreeState(start, None, frontier)
    last = start + frontier.size - 1 + int(getattr(row, "skipped", 0))
    return TreeState(start, last, frontier)


class SqlSubtreeHashes:
    """`ledger.merkle_store.SubtreeHashes` over `merkle_nodes` (levels 4, 8, …), on one
    connection."""

    def __init__(self, conn: Connection) -> None:
        self.conn = conn

    def read(self, level: int, start: int, stop: int) -> Sequence[bytes]:
        params = {"level": level, "start": start, "stop": stop}
        with translated():
            return [bytes(h) for h in self.conn.execute(_NODES, params).scalars()]

    def read_spans(self, spans: Sequence[Span]) -> list[Sequence[bytes]]:
        """Postgres: one round trip for them all (a proof reads up to 28 ranges); SQLite
        (in process, no round trips): one read each."""
        if self.conn.dialect.name != "postgresql" or len(spans) < 2:
            return [self.read(*span) for span in spans]
        levels, starts, stops = (list(column) for column in zip(*spans, strict=True))
        params = {"levels": levels, "starts": starts, "stops": stops}
        found: list[list[bytes]] = [[] for _ in spans]
        with translated():
            for k, value in self.conn.execute(_PG_SPANS, params):
                found[k - 1].append(bytes(value))
        return list(found)


class SqlLeaves:
    """Level 0 of the tree, recomputed: the leaf hashes `start` .. `stop - 1` from the events
    at their ledger positions (SHA-256(0x00 ‖ the event's stored hash)), one read. Leaf i is at
    position `start_position + i` (SQLite: plus the positions burned before it, `merkle_gaps`).
    Answers the leaves up to the first position missing (a shorter list: the proof is refused
    as a stored subtree missing)."""

    def __init__(self, conn: Connection, start_position: int | None = None) -> None:
        self.conn = conn
        self._start = start_position  # leaf 0's (None: read when first needed)

    def __call__(self, start: int, stop: int) -> Sequence[bytes]:
        if stop <= start:
            return []
        first = self.first_position(start)
        with translated():
            rows = self.conn.execute(_HASHES_FROM, {"first": first, "limit": stop - start}).all()
        dense = self.conn.dialect.name == "postgresql"
        found = []
        for at, (position, event_hash) in enumerate(rows):
            if dense and position != first + at:
                break  # a position missing: the leaves after it are not these rows
            found.append(event_leaf_hash(event_hash))
        return found

    def first_position(self, leaf: int) -> int:
        """The ledger position of leaf `leaf`."""
        if self._start is None:
            with translated():
                found = self.conn.execute(_START).scalar()
            if found is None:
                raise SchemaMissingError(
                    "the ledger has no Merkle tree row: run `outcomes migrate`"
                )
            self._start = int(found)
        if self.conn.dialect.name == "postgresql":
            return self._start + leaf
        params = {"start": self._start, "leaf": leaf}
        with translated():
            skipped = self.conn.execute(_SKIPPED_BEFORE_LEAF, params).scalar()
        return self._start + leaf + int(skipped or 0)


def sql_tree_hashes(conn: Connection, state: TreeState | None = None) -> LeavesFromEvents:
    """The stored tree on this connection: levels 4, 8, … from `merkle_nodes`, the leaves
    from the events (leaf 0's position from `state`, if given: no read for it)."""
    start = state.start_position if state is not None else None
    return LeavesFromEvents(SqlSubtreeHashes(conn), SqlLeaves(conn, start))


class SqlTreeReads(TreeReads):
    conn: Connection

    def tree_state(self) -> TreeState:
        return read_state(self.conn)

    def tree_hashes(self, state: TreeState | None = None) -> LeavesFromEvents:
        return sql_tree_hashes(self.conn, state)

    def recorded_tree_heads(self) -> list[RecordedHead]:
        postgres = self.conn.dialect.name == "postgresql"
        with translated():
            built = self.conn.execute(_BUILT_HEAD).first()
            ticks = self.conn.execute(_TICK_HEADS).all() if postgres else []
        found = []
        if built is not None:
            name = "the tree as migration 0020 built it" if postgres else "the tree's row"
            found.append(RecordedHead(name, int(built.tree_size), bytes(built.frontier)))
        found.extend(
            RecordedHead(f"tick {t.tick}", int(t.tree_size), bytes(t.frontier)) for t in ticks
        )
        return sorted(found, key=lambda h: h.tree_size)

    def tree_leaf_index(self, position: int, state: TreeState | None = None) -> int | None:
        state = self.tree_state() if state is None else state
        leaf = position - state.start_position
        if self.conn.dialect.name != "postgresql" and leaf > 0:
            with translated():
                skipped = self.conn.execute(_SKIPPED_AT, {"position": position}).scalar()
            leaf -= int(skipped or 0)
        return leaf if 0 <= leaf < state.tree_size else None

    def leaf_event(self, leaf: int) -> RecordedEvent | None:
        state = self.tree_state()
        if not 0 <= leaf < state.tree_size:
            return None
        position = SqlLeaves(self.conn).first_position(leaf)
        with translated():
            row = self.conn.execute(PAGE, {"after": position - 1, "limit": 1}).first()
        if row is None or int(row.position) != position:
            return None
        return row_to_event(row)

    def stream_ledger_positions(self, stream_id: str) -> list[int | None]:
        postgres = self.conn.dialect.name == "postgresql"
        statement = _PG_STREAM_POSITIONS if postgres else _SQLITE_STREAM_POSITIONS
        with translated():
            found = self.conn.execute(statement, {"stream_id": stream_id}).scalars().all()
        return [None if p is None else int(p) for p in found]

    def events_in_order(self, after: int, limit: int) -> list[RecordedEvent]:
        with translated():
            rows = self.conn.execute(PAGE, {"after": after, "limit": limit}).all()
        return [row_to_event(row) for row in rows]


def grow_at_write(conn: Connection, recorded: Sequence[RecordedEvent]) -> None:
    """SQLite: these events, just written in position order under the write lock, become the
    tree's next leaves; their subtrees and the new frontier are written in the same
    transaction. Positions a write burned before them are noted (`merkle_gaps`); refused if
    they do not come after the tree's last leaf (the tree would no longer be ledger order)."""
    if not sqlite_has_table(conn, "ledger_tree"):
        return  # a ledger not yet migrated to the tree: its migration builds it from the events
    state = read_state(conn)
    expected = state.start_position if state.last_position is None else state.last_position + 1
    positions = [event.position for event in recorded]
    first = positions[0]
    if first > expected and state.last_position is not None:
        skipped = state.last_position - state.start_position - (state.tree_size - 1)
        conn.execute(_PUT_GAP, {"position": first, "skipped": skipped + first - expected})
        expected = first
    elif first > expected:  # nothing in the tree yet: it starts here
        conn.execute(update(ledger_tree).where(ledger_tree.c.id == 1).values(start_position=first))
        expected = first
    if positions != list(range(expected, expected + len(recorded))):
        raise ImmutableLedgerError(
            f"events written at positions {positions[0]}..{positions[-1]} do not follow the "
            f"Merkle tree's last leaf (position {expected - 1}): run `outcomes audit verify`"
        )
    leaves = (event_leaf_hash(e.hash) for e in recorded)
    growth = append_leaves(state.frontier, leaves, leaves=False)
    nodes: list[dict[str, Any]] = [
        {"level": s.level, "idx": s.index, "hash": s.hash} for s in growth.to_store
    ]
    if nodes:
        conn.execute(_PUT_NODES, nodes)
    conn.execute(
        _PUT_STATE,
        {"size": growth.frontier.size, "frontier": b"".join(growth.frontier.hashes)},
    )

"""Ledger order (Postgres's sequencer) and the Merkle tree over it, and the `ledger_events` view
every reader in ledger order reads."""

from __future__ import annotations

from sqlalchemy import (
    BigInteger,
    CheckConstraint,
    Column,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    SmallInteger,
    String,
    Table,
    Text,
)

from ledger.persistence.schema_log import events
from ledger.persistence.schema_metadata import Position, Time, metadata

# Ledger order (migration 0014, ledger.runtime.sequencer): on Postgres writers commit without
# a ledger-wide lock, and the sequencer gives each committed event, after commit, its dense
# ledger position and its ledger-wide link; append-only, as `events` is. SQLite sequences at
# write (its writers are serialized) and leaves both tables empty.
ledger_order = Table(
    "ledger_order",
    metadata,
    Column("position", Position, primary_key=True, autoincrement=False),
    Column("event_position", BigInteger, nullable=False),
    Column("ledger_hash", String(64), nullable=False),
    Column("sequenced_at", Time, nullable=False),
    CheckConstraint("position > 0", name="ck_ledger_order_position_positive"),
    Index("uq_ledger_order_event_position", "event_position", unique=True),
)
# Where the sequencer stood at migration 0015 (the last tick's snapshot, as pg_snapshot text,
# the head position and link; `ledger_ticks` has the newer ticks), and the first position it
# gave (positions are dense from there on).
ledger_sequencer = Table(
    "ledger_sequencer",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=False),
    Column("snapshot", Text, nullable=False),
    Column("head", BigInteger, nullable=False),
    Column("head_hash", String(64), nullable=True),
    Column("dense_from", BigInteger, nullable=False),
    Column("ticks", BigInteger, nullable=False),
    Column("ticked_at", Time, nullable=False),
    CheckConstraint("id = 1", name="ck_ledger_sequencer_one_row"),
)
# Each tick that gave positions: its number, the head position and link after it, and its
# snapshot. The newest is where the sequencer stands; the tick removes the row 100 before its
# own (inserts, never an update: a transaction held open keeps every dead version).
ledger_ticks = Table(
    "ledger_ticks",
    metadata,
    Column("tick", BigInteger, primary_key=True, autoincrement=False),
    Column("head", BigInteger, nullable=False),
    Column("head_hash", String(64), nullable=True),
    Column("snapshot", Text, nullable=False),
    Column("ticked_at", Time, nullable=False),
    # The Merkle tree after the tick (migration 0021): its size and frontier, the roots of its
    # perfect subtrees, largest first, 32 bytes each (None: a tick before 0021).
    Column("tree_size", BigInteger, nullable=True),
    Column("frontier", LargeBinary, nullable=True),
    # The tick's bound (migration 0026, migrations/functions/outcomes_sequence.sql): the last
    # write position given out before the tick took its transaction id, that id, and the
    # position every event the next tick can find lies above (None: a tick before 0026, or
    # SQLite's, which has no ticks).
    Column("position_given", BigInteger, nullable=True),
    Column("tick_xid", BigInteger, nullable=True),
    Column("unsequenced_above", BigInteger, nullable=True),
)

# The Merkle tree over ledger order (migration 0021, docs/integrity.md "Proofs"): every
# complete subtree at a level divisible by 4 above the leaves (4, 8, …; ledger.merkle_store;
# a leaf is recomputed from its event, ledger/persistence/sql_tree.py), added
# once and never changed. Leaf i is the event at ledger position `ledger_tree.start_position
# + i`. Postgres: the sequencer's tick extends it; SQLite: each write, under its write lock.
merkle_nodes = Table(
    "merkle_nodes",
    metadata,
    Column("level", SmallInteger, primary_key=True, autoincrement=False),
    Column("idx", BigInteger, primary_key=True, autoincrement=False),
    Column("hash", LargeBinary, nullable=False),
)
# SQLite only (Postgres's ledger positions are dense): from `position` on, `skipped` positions
# after the tree's first hold no leaf (positions a write burned: the leaf of position p is
# p - start_position - the skipped of the last row at or below p). Append-only.
merkle_gaps = Table(
    "merkle_gaps",
    metadata,
    Column("position", BigInteger, primary_key=True, autoincrement=False),
    Column("skipped", BigInteger, nullable=False),
)
# One row: the position of leaf 0, and the tree's size and frontier (Postgres: as migration
# 0020 built it, the ticks keep it since; SQLite: as the last write left it).
ledger_tree = Table(
    "ledger_tree",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=False),
    Column("start_position", BigInteger, nullable=False),
    Column("tree_size", BigInteger, nullable=False),
    Column("frontier", LargeBinary, nullable=False),
    Column("built_at", Time, nullable=False),
    CheckConstraint("id = 1", name="ck_ledger_tree_one_row"),
)

# The view every reader in ledger order reads: each sequenced event, `position` its ledger
# position and `ledger_hash` its link (`write_position`: the row in `events`). On SQLite it is
# `events` itself. A view, so it is declared apart from the tables the migrations must build.
views = MetaData()
ledger_events = Table(
    "ledger_events",
    views,
    Column("position", Position, primary_key=True),
    *(Column(c.name, c.type) for c in events.columns if c.name not in ("position", "ledger_hash")),
    Column("ledger_hash", String(64)),
    Column("write_position", Position),
)

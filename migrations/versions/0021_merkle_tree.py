"""The ledger's Merkle tree (RFC 9162 §2.1), kept as the ledger grows (docs/integrity.md,
"Proofs").

- `merkle_nodes (level, idx, hash)`: every complete subtree of the tree at a level divisible
  by 4 above the leaves (4: 16 leaves, 8: 256, …), appended once, never changed (append-only:
  triggers, and the application role may only read and insert). Leaf i is the event at ledger
  position `ledger_tree.start_position + i`; its leaf hash is SHA-256(0x00 || the 32 bytes of
  the event's `hash`), recomputed from the event whenever a proof needs it (not stored: a row
  a leaf cost 125 bytes on Postgres).
- `merkle_gaps` (SQLite only; Postgres's positions are dense): the positions a write burned
  after the tree's start, so the leaf of a position is still found in one read.
- `ledger_tree`: one row: the position of leaf 0, and the tree's size and frontier as this
  migration left them (SQLite: as the last write left them; it grows the tree at write).
- `ledger_ticks.tree_size`, `.frontier` (Postgres): the tree after each tick. The sequencer
  (`outcomes_sequence`, migrations/functions/outcomes_sequence.sql, snapshotted here as
  `<revision>_outcomes_sequence.sql`) extends the tree in the transaction that gives the
  positions, with `outcomes_tree_extend`.

A ledger that already holds events gets its tree here, in one pass over them in ledger order,
from the first position of the last dense run of positions (all of them on a ledger sequenced
since 0014 that was never archived); positions before `start_position` stay covered by the
ledger-wide chain only.

Revision ID: 0021
Revises: 0020
Create Date: 2026-12-10
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import sqlalchemy as sa
from alembic import op

revision = "0021"
down_revision = "0020"
branch_labels = None
depends_on = None

HERE = Path(__file__).parent
SEQUENCE_FUNCTION = HERE / f"{revision}_outcomes_sequence.sql"
PREVIOUS_SEQUENCE_FUNCTION = HERE / "0015_outcomes_sequence.sql"
STRATUM = 4  # levels 4, 8, … are stored (ledger.merkle_store.STRATUM; leaves recomputed)
CHUNK = 10_000  # events hashed into the tree per statement while building it

POSTGRES_IMMUTABLE = [
    "CREATE TRIGGER merkle_nodes_no_update_delete BEFORE UPDATE OR DELETE ON merkle_nodes "
    "FOR EACH ROW EXECUTE FUNCTION outcomes_events_immutable()",
    "CREATE TRIGGER merkle_nodes_no_truncate BEFORE TRUNCATE ON merkle_nodes "
    "FOR EACH STATEMENT EXECUTE FUNCTION outcomes_events_immutable()",
]
SQLITE_IMMUTABLE = [
    "CREATE TRIGGER merkle_nodes_no_update BEFORE UPDATE ON merkle_nodes "
    "BEGIN SELECT RAISE(ABORT, 'the Merkle tree is append-only: UPDATE refused'); END",
    "CREATE TRIGGER merkle_nodes_no_delete BEFORE DELETE ON merkle_nodes "
    "BEGIN SELECT RAISE(ABORT, 'the Merkle tree is append-only: DELETE refused'); END",
]
# The tree over the positions already given, under the sequencer's lock (no tick meanwhile):
# from the first position of the last dense run up to the head.
POSTGRES_BUILD = f"""
DO $$
DECLARE
    h bigint;
    s bigint;
    a bigint;
    size bigint := 0;
    front bytea := ''::bytea;
    hashes text[];
BEGIN
    PERFORM pg_advisory_xact_lock(8031453480971759982);
    SELECT x.head INTO h FROM outcomes_sequencer_at() x;
    SELECT coalesce(max(o.position), h + 1) INTO s FROM ledger_order o
     WHERE o.position <= h
       AND NOT EXISTS (SELECT 1 FROM ledger_order p WHERE p.position = o.position - 1);
    a := s;
    WHILE a <= h LOOP
        SELECT array_agg(e.hash::text ORDER BY o.position) INTO hashes
          FROM ledger_order o JOIN events e ON e.position = o.event_position
         WHERE o.position >= a AND o.position < a + {CHUNK} AND o.position <= h;
        IF coalesce(cardinality(hashes), 0) <> least({CHUNK}, h - a + 1) THEN
            RAISE EXCEPTION 'ledger positions % to % are not whole: run `outcomes audit verify`',
                a, least(a + {CHUNK} - 1, h) USING ERRCODE = 'data_corrupted';
        END IF;
        SELECT t.tree_size, t.frontier INTO size, front
          FROM outcomes_tree_extend(size, front, hashes) t;
        a := a + {CHUNK};
    END LOOP;
    INSERT INTO ledger_tree (id, start_position, tree_size, frontier, built_at)
    VALUES (1, s, size, front, clock_timestamp());
END $$
"""
SQLITE_START = """
SELECT coalesce(
    (SELECT max(e.position) FROM events e
      WHERE NOT EXISTS (SELECT 1 FROM events p WHERE p.position = e.position - 1)),
    (SELECT s.seq + 1 FROM sqlite_sequence s WHERE s.name = 'events'),
    1)
"""


def _tables() -> None:
    op.create_table(
        "merkle_nodes",
        sa.Column("level", sa.SmallInteger(), nullable=False, autoincrement=False),
        sa.Column("idx", sa.BigInteger(), nullable=False, autoincrement=False),
        sa.Column("hash", sa.LargeBinary(), nullable=False),
        sa.PrimaryKeyConstraint("level", "idx", name="pk_merkle_nodes"),
    )
    op.create_table(
        "merkle_gaps",
        sa.Column("position", sa.BigInteger(), nullable=False, autoincrement=False),
        sa.Column("skipped", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("position", name="pk_merkle_gaps"),
    )
    op.create_table(
        "ledger_tree",
        sa.Column("id", sa.Integer(), autoincrement=False, nullable=False),
        sa.Column("start_position", sa.BigInteger(), nullable=False),
        sa.Column("tree_size", sa.BigInteger(), nullable=False),
        sa.Column("frontier", sa.LargeBinary(), nullable=False),
        sa.Column("built_at", sa.DateTime(timezone=True), nullable=False),
        sa.CheckConstraint("id = 1", name="ck_ledger_tree_one_row"),
        sa.PrimaryKeyConstraint("id", name="pk_ledger_tree"),
    )
    op.add_column("ledger_ticks", sa.Column("tree_size", sa.BigInteger(), nullable=True))
    op.add_column("ledger_ticks", sa.Column("frontier", sa.LargeBinary(), nullable=True))


def _sqlite_build() -> None:
    """The tree over the events already written, in position order (what the store's writes
    then extend), computed here in plain Python as ledger.merkle_store.append_leaves does."""
    bind = op.get_bind()
    start = int(bind.execute(sa.text(SQLITE_START)).scalar_one())
    stack: list[bytes] = []
    size = 0
    nodes: list[dict[str, object]] = []
    insert = sa.text("INSERT INTO merkle_nodes (level, idx, hash) VALUES (:level, :idx, :hash)")
    rows = bind.execute(
        sa.text("SELECT hash FROM events WHERE position >= :s ORDER BY position"), {"s": start}
    )
    for (event_hash,) in rows:
        value = hashlib.sha256(b"\x00" + bytes.fromhex(event_hash)).digest()
        level = 0
        while size >> level & 1:
            value = hashlib.sha256(b"\x01" + stack.pop() + value).digest()
            level += 1
            if level % STRATUM == 0:
                nodes.append({"level": level, "idx": size >> level, "hash": value})
        stack.append(value)
        size += 1
        if len(nodes) >= CHUNK:
            bind.execute(insert, nodes)
            nodes = []
    if nodes:
        bind.execute(insert, nodes)
    bind.execute(
        sa.text(
            "INSERT INTO ledger_tree (id, start_position, tree_size, frontier, built_at)"
            " VALUES (1, :s, :n, :f, CURRENT_TIMESTAMP)"
        ),
        {"s": start, "n": size, "f": b"".join(stack)},
    )


def upgrade() -> None:
    _tables()
    if op.get_bind().dialect.name != "postgresql":
        for statement in SQLITE_IMMUTABLE:
            op.execute(statement)
        _sqlite_build()
        return
    for statement in POSTGRES_IMMUTABLE:
        op.execute(statement)
    op.execute(SEQUENCE_FUNCTION.read_text())
    op.execute(POSTGRES_BUILD)


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute(PREVIOUS_SEQUENCE_FUNCTION.read_text())
        op.execute("DROP FUNCTION outcomes_tree_at()")
        op.execute("DROP FUNCTION outcomes_tree_extend(bigint, bytea, text[])")
    op.drop_column("ledger_ticks", "frontier")
    op.drop_column("ledger_ticks", "tree_size")
    op.drop_table("ledger_tree")
    op.drop_table("merkle_gaps")
    op.drop_table("merkle_nodes")

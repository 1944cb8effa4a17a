"""The ledger-wide chain, the per-ledger request key, and brakes decided from events.

- `events.ledger_hash`: each event's hash chained to the previous event's in position order
  (`ledger.chain.ledger_link`), so a deleted, inserted or reordered event anywhere breaks the
  chain at the next position. Postgres computes it in a BEFORE INSERT trigger (every writer,
  every path); SQLite's store computes it under its write lock. Existing events are chained
  here, in position order.
- `ledger_meta`: a random key made here, once per ledger; request fingerprints are HMACs
  under it, so a published fingerprint is no oracle for guessing argument values.
- `ix_events_brake_pulls`: the brake checks read brake pulls from events (a partial index over
  them alone), not from the brakes read model, which a table owner could edit. On Postgres
  every brake check (the batched append function's, and the store's reads) asks one function,
  `outcomes_brakes_holding(scopes)` (NULL: every scope), so there is one place where the brake
  state is read — and one privilege whose loss makes it unreadable, failing closed.

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-30
"""

from __future__ import annotations

import hashlib
import importlib.util
import secrets
from pathlib import Path

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None

# sha256(prev ledger hash, or "" for the first event, ":" and the event's own hash), hex.
LINK_SQL = "encode(sha256(convert_to(coalesce({prev}, '') || ':' || {hash}, 'UTF8')), 'hex')"

POSTGRES_CHAIN = f"""
CREATE OR REPLACE FUNCTION outcomes_ledger_link() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    prev text;
BEGIN
    -- Every append holds the append lock to commit, so the newest row is the previous one.
    SELECT e.ledger_hash INTO prev FROM events e ORDER BY e.position DESC LIMIT 1;
    NEW.ledger_hash := {LINK_SQL.format(prev="prev", hash="NEW.hash")};
    RETURN NEW;
END $$
"""
POSTGRES_BACKFILL = f"""
DO $$
DECLARE
    r record;
    prev text := NULL;
BEGIN
    FOR r IN SELECT position, hash FROM events ORDER BY position LOOP
        prev := {LINK_SQL.format(prev="prev", hash="r.hash")};
        UPDATE events SET ledger_hash = prev WHERE position = r.position;
    END LOOP;
END $$
"""
POSTGRES_BRAKES_HOLDING = """
CREATE OR REPLACE FUNCTION outcomes_brakes_holding(p_scopes jsonb) RETURNS jsonb
LANGUAGE sql STABLE AS $$
    SELECT jsonb_agg(jsonb_build_object(
               'brake_id', p.data->>'brake_id', 'scope', p.data->>'scope',
               'reason', p.data->>'reason', 'operator', p.data->>'operator',
               'pulled_at', p.recorded_at, 'active', true, 'ledger_position', p.position)
           ORDER BY p.recorded_at, p.data->>'brake_id')
      FROM events p
     WHERE p.type = 'brake.pulled'
       AND (p_scopes IS NULL  -- every scope: the brakes that hold anywhere
            OR p.data->>'scope' IN (SELECT jsonb_array_elements_text(p_scopes)))
       AND NOT EXISTS (SELECT 1 FROM events r
                        WHERE r.stream_id = p.stream_id AND r.stream_version > p.stream_version)
$$
"""
# 0004's function, changed in place: its brake check asks the events instead of the brakes
# table, and it returns each event's ledger-wide link beside its position.
FUNCTION_CHANGES = [
    (
        """            SELECT jsonb_agg(b.view) INTO held FROM brakes b
             WHERE b.active AND b.scope IN
                   (SELECT jsonb_array_elements_text(item->'brake_scopes'));""",
        "            held := outcomes_brakes_holding(item->'brake_scopes');",
    ),
    ("    positions bigint[];\n", "    positions bigint[];\n    links text[];\n    link text;\n"),
    ("        positions := '{}';\n", "        positions := '{}';\n        links := '{}';\n"),
    (
        "            RETURNING position INTO pos;\n            positions := positions || pos;\n",
        "            RETURNING position, ledger_hash INTO pos, link;\n"
        "            positions := positions || pos;\n            links := links || link;\n",
    ),
    (
        "jsonb_build_object('status', 'ok', 'positions', to_jsonb(positions))",
        "jsonb_build_object('status', 'ok', 'positions', to_jsonb(positions),\n"
        "                               'ledger_hashes', to_jsonb(links))",
    ),
]
SQLITE_NO_UPDATE = """
CREATE TRIGGER events_no_update BEFORE UPDATE ON events
BEGIN SELECT RAISE(ABORT, 'ledger events are append-only: UPDATE refused'); END
"""


def _append_function_0004() -> str:
    """0004's function text, loaded from its file (migrations are not an importable package)."""
    path = Path(__file__).with_name("0004_append_jobs.py")
    spec = importlib.util.spec_from_file_location("outcomes_migration_0004", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return str(module.FUNCTION)


def append_function() -> str:
    """The append function as this migration leaves it: 0004's with FUNCTION_CHANGES."""
    function = _append_function_0004()
    for old, new in FUNCTION_CHANGES:
        assert function.count(old) == 1, f"0004's function has changed: {old!r}"
        function = function.replace(old, new)
    return function


def _link(prev: str | None, event_hash: str) -> str:
    return hashlib.sha256(f"{prev or ''}:{event_hash}".encode()).hexdigest()


def upgrade() -> None:
    postgres = op.get_bind().dialect.name == "postgresql"
    op.add_column("events", sa.Column("ledger_hash", sa.String(64), nullable=True))
    if postgres:
        op.execute("ALTER TABLE events DISABLE TRIGGER events_no_update_delete")
        op.execute(POSTGRES_BACKFILL)
        op.execute("ALTER TABLE events ENABLE TRIGGER events_no_update_delete")
        op.execute(POSTGRES_CHAIN)
        op.execute(
            "CREATE TRIGGER events_ledger_chain BEFORE INSERT ON events "
            "FOR EACH ROW EXECUTE FUNCTION outcomes_ledger_link()"
        )
    else:
        conn = op.get_bind()
        op.execute("DROP TRIGGER IF EXISTS events_no_update")
        prev: str | None = None
        rows = conn.execute(sa.text("SELECT position, hash FROM events ORDER BY position"))
        for position, event_hash in rows.all():
            prev = _link(prev, event_hash)
            conn.execute(
                sa.text("UPDATE events SET ledger_hash = :h WHERE position = :p"),
                {"h": prev, "p": position},
            )
        op.execute(SQLITE_NO_UPDATE)
    op.create_index(
        "ix_events_brake_pulls",
        "events",
        ["stream_id"],
        postgresql_where=sa.text("type = 'brake.pulled'"),
        sqlite_where=sa.text("type = 'brake.pulled'"),
    )
    meta = op.create_table(
        "ledger_meta",
        sa.Column("key", sa.String(64), nullable=False),
        sa.Column("value", sa.Text(), nullable=False),
        sa.PrimaryKeyConstraint("key", name="pk_ledger_meta"),
    )
    op.bulk_insert(meta, [{"key": "request_key", "value": secrets.token_hex(32)}])
    if postgres:
        op.execute(POSTGRES_BRAKES_HOLDING)
        op.execute(append_function())


def downgrade() -> None:
    postgres = op.get_bind().dialect.name == "postgresql"
    if postgres:
        op.execute(_append_function_0004())
        op.execute("DROP FUNCTION IF EXISTS outcomes_brakes_holding(jsonb)")
        op.execute("DROP TRIGGER IF EXISTS events_ledger_chain ON events")
        op.execute("DROP FUNCTION IF EXISTS outcomes_ledger_link()")
    op.drop_table("ledger_meta")
    op.drop_index("ix_events_brake_pulls", table_name="events")
    op.drop_column("events", "ledger_hash")  # SQLite ≥ 3.35 drops columns in place

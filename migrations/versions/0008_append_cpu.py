"""Postgres: the append function costs less server CPU per item, with the same answers.

`outcomes_append_jobs` is replaced (same name, argument and result, so the grants stay): the
same checks in the same order, the same statuses, locks, rows and notifications. PL/pgSQL pays
for every SQL statement it runs (an executor start-up each), so it now runs fewer:

- The ledger-wide link. The function reads the newest `ledger_hash` once per call, under the
  append lock (every writer holds it to commit, so the newest row is the previous one), and
  chains each event it inserts itself, with the trigger's formula (0005's `LINK_SQL`). The
  trigger `events_ledger_chain` now fires only for rows inserted with `ledger_hash` NULL
  (`WHEN (NEW.ledger_hash IS NULL)`): every other writer — the store's general append, a person
  at `psql` — is still chained by it. It used to overwrite whatever a writer supplied; now a
  value the application role supplies stands. That is no new way around the chain: `audit
  verify` recomputes every link from the previous row's and reports a wrong one
  (`ledger_chain_broken` at its position), as it reports a row the owner slipped in
  (tests/persistence/test_append_links.py).
- No query over the argument itself: the items and their events are walked by index
  (`p_items->i`) instead of `jsonb_array_elements` cursors, and the terminal-event test is a
  plain expression; the stream is asked for its terminal event only when the item brings one.
- The brake check is asked once per call for the same scopes (a batch's submits and claims
  mostly share theirs). Under the append lock the brakes change only by this call's own events:
  a `brake.pulled`, or any event after a pull in its stream (a release). Either makes the next
  check ask again.
- The answers are collected in an array and turned into JSON once (no growing JSON copy).

The per-event duplicate probe stays as it was (one unique-index lookup each). One `= ANY` probe
for all of an item's events was planned as a sequential scan on a new ledger, and PL/pgSQL kept
that plan (0007's lesson); folding the first probe into the head query was measured no faster.

Measured by replaying the 2,400 items (470 batches) captured from a `python -m bench.throughput`
run, three passes, into two fresh ledgers, one with 0007's function and one with this, batch by
batch in turn, reading each backend's CPU time (/proc/PID/schedstat; a scratch script, not kept
here): 353-414 us per item before, 290-347 after, 59-67 us (about 16%) less in three runs. The
trigger's part was about 35 us, the brake check asked once per scopes about 23. Answers, rows
(positions and links included) and notifications were identical, also with conflicts,
duplicates, idempotency hits, terminal refusals and brakes pulled and released within a call
mixed in. Single-event calls save about 60 us each; `python -m bench.append` went from 0.48x and
0.55x (new job, next event) to 0.51x and 0.59x, medians of six paired runs on a noisy machine.

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-01
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def _migration(name: str) -> ModuleType:
    """An earlier migration's module, loaded from its file (migrations are not a package)."""
    path = Path(__file__).with_name(name)
    spec = importlib.util.spec_from_file_location(f"outcomes_migration_{path.stem}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_0004 = _migration("0004_append_jobs.py")
APPEND_LOCK_KEY: int = _0004.APPEND_LOCK_KEY
BRAKE_LOCK_KEY: int = _0004.BRAKE_LOCK_KEY
TERMINAL: str = _0004.TERMINAL
WRITE_ROWS: str = _0004.WRITE_ROWS  # the read-model row, the lease and the notification
# The trigger's formula (0005), chaining `link` (the previous event's) to this event's hash.
NEXT_LINK: str = _migration("0005_ledger_chain.py").LINK_SQL.format(
    prev="link", hash="(ev->>'hash')"
)

FUNCTION = f"""
CREATE OR REPLACE FUNCTION outcomes_append_jobs(p_items jsonb) RETURNS jsonb
LANGUAGE plpgsql AS $$
DECLARE
    n_items integer := coalesce(jsonb_array_length(p_items), 0);
    n_events integer;
    item jsonb;
    item_events jsonb;
    ev jsonb;
    job jsonb;
    lease jsonb;
    results jsonb[] := '{{}}';
    stream text;
    head_version integer;
    head_hash text;
    found text;
    held jsonb;
    held_for jsonb;  -- the scopes `held` answers for (NULL: ask again)
    head_type text;
    pos bigint;
    positions bigint[];
    links text[];
    link text;
    closing boolean;
BEGIN
    -- A claim takes the brakes lock shared first, as `brake pull` takes it exclusive (and
    -- before the append lock, in the order `brake pull` takes them: no deadlock).
    FOR i IN 0 .. n_items - 1 LOOP
        IF (p_items->i->>'brakes_lock')::boolean THEN
            PERFORM pg_advisory_xact_lock_shared({BRAKE_LOCK_KEY});
            EXIT;
        END IF;
    END LOOP;
    PERFORM pg_advisory_xact_lock({APPEND_LOCK_KEY});
    -- Every writer holds the append lock to commit, so the newest event is the one the first
    -- event inserted here follows; each next one follows the one inserted before it.
    SELECT e.ledger_hash INTO link FROM events e ORDER BY e.position DESC LIMIT 1;
    FOR i IN 0 .. n_items - 1 LOOP
        item := p_items->i;
        stream := item->>'stream_id';
        job := item->'job';
        item_events := item->'events';
        SELECT e.stream_version, e.hash, e.type INTO head_version, head_hash, head_type
          FROM events e WHERE e.stream_id = stream
         ORDER BY e.stream_version DESC LIMIT 1;
        head_version := coalesce(head_version, 0);
        ev := item_events->0;
        IF head_version <> (ev->>'stream_version')::integer - 1
           OR head_hash IS DISTINCT FROM ev->>'prev_hash' THEN
            results := results || jsonb_build_object('status', 'conflict', 'version', head_version);
            CONTINUE;
        END IF;
        IF jsonb_typeof(item->'brake_scopes') = 'array' THEN
            -- The brakes cannot change under the append lock but by this call's own events
            -- (see below), so the same scopes get the same answer: asked once.
            IF held_for IS DISTINCT FROM item->'brake_scopes' THEN
                held_for := item->'brake_scopes';
                held := outcomes_brakes_holding(held_for);
            END IF;
            IF held IS NOT NULL THEN
                results := results || jsonb_build_object('status', 'braked', 'brakes', held);
                CONTINUE;
            END IF;
        END IF;
        n_events := coalesce(jsonb_array_length(item_events), 0);
        closing := false;  -- a terminal event among the item's: looked for without a query
        FOR k IN 0 .. n_events - 1 LOOP
            IF item_events->k->>'type' IN ({TERMINAL}) THEN
                closing := true;
            END IF;
        END LOOP;
        IF closing THEN
            IF EXISTS (SELECT 1 FROM events e
                        WHERE e.stream_id = stream AND e.type IN ({TERMINAL})) THEN
                results := results || jsonb_build_object('status', 'terminal');
                CONTINUE;
            END IF;
        END IF;
        found := NULL;
        FOR k IN 0 .. n_events - 1 LOOP
            SELECT 'duplicate' INTO found FROM events e
             WHERE e.event_id = (item_events->k->>'event_id')::uuid;  -- one index probe per event
            EXIT WHEN found IS NOT NULL;
        END LOOP;
        IF found IS NOT NULL THEN
            results := results || jsonb_build_object('status', 'duplicate');
            CONTINUE;
        END IF;
        IF head_version = 0 AND job->>'idempotency_key' IS NOT NULL THEN
            found := NULL;
            EXECUTE 'SELECT j.job_id FROM jobs j
                      WHERE j.account = $1 AND j.idempotency_key = $2'
               INTO found USING job->>'account', job->>'idempotency_key';
            IF found IS NOT NULL THEN
                results := results || jsonb_build_object('status', 'idempotency', 'job_id', found);
                CONTINUE;
            END IF;
        END IF;
        positions := '{{}}';
        links := '{{}}';
        FOR k IN 0 .. n_events - 1 LOOP
            ev := item_events->k;
            link := {NEXT_LINK};
            INSERT INTO events (stream_id, stream_version, event_id, type, data, code, actor,
                                recorded_at, prev_hash, hash, ledger_hash)
            VALUES (stream, (ev->>'stream_version')::integer, (ev->>'event_id')::uuid,
                    ev->>'type', ev->'data', ev->>'code', ev->>'actor',
                    (ev->>'recorded_at')::timestamptz, ev->>'prev_hash', ev->>'hash', link)
            RETURNING position INTO pos;
            positions := positions || pos;
            links := links || link;
            -- A pull, or an event after a pull in its stream, changes which brakes hold.
            IF ev->>'type' = 'brake.pulled' OR head_type = 'brake.pulled' THEN
                held_for := NULL;
            END IF;
        END LOOP;
{WRITE_ROWS}\
        results := results || jsonb_build_object('status', 'ok', 'positions', to_jsonb(positions),
                                                 'ledger_hashes', to_jsonb(links));
    END LOOP;
    RETURN to_jsonb(results);
END $$
"""
TRIGGER = (
    "CREATE TRIGGER events_ledger_chain BEFORE INSERT ON events FOR EACH ROW {when}"
    "EXECUTE FUNCTION outcomes_ledger_link()"
)


def upgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute(FUNCTION)
        op.execute("DROP TRIGGER events_ledger_chain ON events")
        op.execute(TRIGGER.format(when="WHEN (NEW.ledger_hash IS NULL) "))


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute(_migration("0007_append_plans.py").append_function())
        op.execute("DROP TRIGGER events_ledger_chain ON events")
        op.execute(TRIGGER.format(when=""))

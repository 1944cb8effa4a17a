-- outcomes_sequence: one tick of the sequencer (ledger/services/sequencer.py, the store's
-- `sequence`). Writers commit without a ledger-wide lock, so positions they take at insert are
-- not in commit order; the sequencer gives every committed event its dense ledger position and
-- its ledger-wide link (`ledger_order`), in the manner of PgQ's ticks: a tick takes the
-- database's snapshot, and its events are those whose transaction is visible in it and was not
-- in the previous tick's, in write order. A transaction that
-- commits later is in a later tick, so a reader that has seen a position never sees an event
-- appear before it; a transaction held open delays only its own events, never the others'.
-- Ticks exclude each other with a transaction-level lock: p_wait waits for it (a reader that
-- wants the events committed before it asked), else a tick already under way answers -1.
-- This file is the functions as the newest migration creates them; that migration runs its copy.
--
-- Since 0020 a tick also extends the ledger's Merkle tree (docs/integrity.md, "Proofs";
-- ledger/merkle_store.py), in the same transaction as it gives positions: leaf i is the event
-- at ledger position ledger_tree.start_position + i, its leaf hash SHA-256(0x00 || the 32
-- bytes of the event's `hash`); the tick's row in `ledger_ticks` keeps the tree's size and
-- frontier after it (the newest row with them is the tree's head; before any, `ledger_tree`'s
-- own), and `merkle_nodes` every complete subtree of level 4, 8, … (append-only). The leaves
-- themselves are not stored: each is recomputed from its event's hash when a proof reads it
-- (ledger/persistence/sql_tree.py), as a row with its index a leaf cost 125 bytes.
--
-- outcomes_sequencer_at: where the sequencer stands — the newest tick's number, head position
-- and link, and snapshot. Each tick that gives positions inserts a row into `ledger_ticks` (and
-- removes the one a hundred ticks older): an update of one row would leave a dead version per
-- tick that a transaction held open keeps from being pruned, and every tick would walk them all
-- (0015). With no tick row yet, the state 0014 left in `ledger_sequencer`.
--
-- Since 0024 a tick runs with `enable_seqscan = off` (as `outcomes_append_jobs`, whose file
-- says why): its plans, cached per session, never scan a table that was small when planned.
-- Since 0025 `outcomes_unsequenced` never plans in parallel (below).
--
-- Since 0026 a tick looks only in the partitions its events can be in. It asked every
-- partition's txid index for new transactions, and planned that lookup over every partition at
-- each tick: at 100k jobs in 33 partitions an idle tick took 4.7 ms (2.5 ms of it planning)
-- where an empty ledger's took 0.9, every 5 ms while the ledger is busy. Now each tick that
-- gives positions keeps a bound, `unsequenced_above`: every event no tick has sequenced yet
-- was written above it. Why it holds:
-- - a writer takes its transaction id before its first write position (the position's default,
--   `outcomes_event_position`, asks for the id first);
-- - a tick reads the last write position given out (`position_given`) before its first insert,
--   which takes its own id (`tick_xid`): a transaction with a larger id took it later, so
--   wrote every event above `position_given`;
-- - the events the next tick can find are those of transactions not visible in this tick's
--   snapshot, whose ids are all at or past its xmin (a snapshot's xmax is no such line: a
--   transaction may hold an id past it, taken before the snapshot);
-- - so they lie above the `position_given` of the newest kept tick whose `tick_xid` is below
--   this snapshot's xmin. The bound never falls (xmin only grows); a transaction held open past
--   the hundred ticks kept holds it where it was: slower, never wrong. (A snapshot's xmin is
--   the whole server's: a writer open in another database holds the bound back too.)
-- Ticks from before 0026 (and a tick called inside a transaction that had an id already) keep
-- no `position_given`: until one does, ticks read from 0, every partition, as before. A row
-- written by hand with its own position, not the default, is outside this promise.
CREATE OR REPLACE FUNCTION outcomes_sequencer_at()
RETURNS TABLE (tick bigint, head bigint, head_hash text, snapshot pg_snapshot,
               ticked_at timestamptz, unsequenced_above bigint)
LANGUAGE sql STABLE AS $$
    SELECT x.tick, x.head, x.head_hash, x.snapshot, x.ticked_at, x.above FROM (
        (SELECT 1 AS rank, t.tick, t.head, t.head_hash::text AS head_hash,
                t.snapshot::pg_snapshot AS snapshot, t.ticked_at,
                coalesce(t.unsequenced_above, 0) AS above
           FROM ledger_ticks t ORDER BY t.tick DESC LIMIT 1)
        UNION ALL
        (SELECT 2, s.ticks, s.head, s.head_hash::text, s.snapshot::pg_snapshot, s.ticked_at,
                0::bigint
           FROM ledger_sequencer s WHERE s.id = 1)
    ) AS x ORDER BY x.rank LIMIT 1
$$;

-- outcomes_event_position: an event's write position (the default of `events.position`), taken
-- after its transaction's id: the tick's bound above rests on that order. Without it a writer's
-- first row drew its position before its id (defaults run in column order), and a writer paused
-- between the two could write below a bound a tick had already passed.
CREATE OR REPLACE FUNCTION outcomes_event_position() RETURNS bigint
LANGUAGE plpgsql VOLATILE AS $$
BEGIN
    PERFORM pg_current_xact_id();
    RETURN nextval('events_position_seq');
END $$;

-- outcomes_unsequenced: the events a tick after `p_after` up to `p_upto` gives positions to —
-- of the transactions visible in `p_upto` and not in `p_after` (at or past its xmax, or in
-- progress in it), written above `p_above` (the bound `p_after`'s tick kept, above: a
-- constant when planned, so the partitions below it are not planned nor read), without an order
-- row yet. The tick and the sequencer's lag both ask it.
-- Two index ranges on ix_events_txid, planned with the snapshots' values (EXECUTE), and only
-- as index scans: the planner cannot estimate a range of xid8 (it guessed a fortieth of a
-- busy ledger's events for a tick's few dozen) and chose to scan every event and every order
-- row at each tick, so ticks slowed as the ledger grew (0015). Never in parallel (0025): over
-- many partitions those estimates made the plan a parallel one, and starting its workers cost
-- more than the tick's reads (an idle tick at 100k jobs in 30 partitions: 22.7 ms, 5.7 ms
-- without; 0.9 ms on an empty ledger), every 5 ms while the ledger is busy.
CREATE OR REPLACE FUNCTION outcomes_unsequenced(p_after pg_snapshot, p_upto pg_snapshot,
                                                p_above bigint)
RETURNS TABLE (event_position bigint, hash text, recorded_at timestamptz)
LANGUAGE plpgsql STABLE
SET enable_seqscan = off SET enable_hashjoin = off SET enable_mergejoin = off
SET max_parallel_workers_per_gather = 0
AS $$
BEGIN
    RETURN QUERY EXECUTE $q$
        SELECT e.position, e.hash::text, e.recorded_at FROM events e
         WHERE e.position > $4 AND e.txid >= $1 AND pg_visible_in_snapshot(e.txid, $3)
           -- Never true but for a row someone placed by hand: it keeps its place, and
           -- `audit verify` judges it. (The bound again, for the order rows' partitions.)
           AND NOT EXISTS (SELECT 1 FROM ledger_order o
                            WHERE o.event_position = e.position AND o.event_position > $4)
        UNION ALL
        SELECT e.position, e.hash::text, e.recorded_at FROM events e
         WHERE e.position > $4 AND e.txid = ANY ($2) AND e.txid < $1
           AND pg_visible_in_snapshot(e.txid, $3)
           AND NOT EXISTS (SELECT 1 FROM ledger_order o
                            WHERE o.event_position = e.position AND o.event_position > $4)
    $q$ USING pg_snapshot_xmax(p_after), ARRAY(SELECT pg_snapshot_xip(p_after)), p_upto,
              coalesce(p_above, 0);
END $$;

-- outcomes_tree_extend: the tree of `p_size` leaves whose frontier is `p_frontier` (the roots
-- of its perfect subtrees, largest first, 32 bytes each) with these events' hashes (hex) as its
-- next leaves: stores each subtree they complete at a level divisible by 4 above the leaves
-- (4, 8, …), and answers the new size and frontier. Never reads a stored node: O(1) hashes a leaf,
-- amortised (ledger.merkle.Frontier.grow computes the same).
CREATE OR REPLACE FUNCTION outcomes_tree_extend(p_size bigint, p_frontier bytea,
                                                p_hashes text[],
                                                OUT tree_size bigint, OUT frontier bytea)
LANGUAGE plpgsql AS $$
DECLARE
    n bigint := p_size;
    f bytea := p_frontier;
    v bytea;
    h text;
    lvl integer;
    k integer := 0;
    levels smallint[] := '{}';
    idxs bigint[] := '{}';
    hashes bytea[] := '{}';
BEGIN
    IF length(f) <> 32 * bit_count(n::bit(64)) THEN
        RAISE EXCEPTION 'the tree of % leaves has a frontier of % bytes', n, length(f)
            USING ERRCODE = 'data_corrupted';
    END IF;
    FOREACH h IN ARRAY p_hashes LOOP
        v := sha256('\x00'::bytea || decode(h, 'hex'));
        lvl := 0;
        WHILE (n >> lvl) & 1 = 1 LOOP
            v := sha256('\x01'::bytea || substring(f FROM length(f) - 31) || v);
            f := substring(f FOR length(f) - 32);
            lvl := lvl + 1;
            IF lvl % 4 = 0 THEN
                k := k + 1;
                levels[k] := lvl; idxs[k] := n >> lvl; hashes[k] := v;
            END IF;
        END LOOP;
        f := f || v;
        n := n + 1;
    END LOOP;
    IF k > 0 THEN
        INSERT INTO merkle_nodes (level, idx, hash)
        SELECT u.l, u.i, u.h FROM unnest(levels, idxs, hashes) AS u (l, i, h);
    END IF;
    tree_size := n;
    frontier := f;
END $$;

-- outcomes_tree_at: the tree's size and frontier now (the newest tick that extended it, else
-- what migration 0021 built), and the position of its leaf 0.
CREATE OR REPLACE FUNCTION outcomes_tree_at()
RETURNS TABLE (tree_size bigint, frontier bytea, start_position bigint)
LANGUAGE sql STABLE AS $$
    SELECT coalesce(t.tree_size, l.tree_size), coalesce(t.frontier, l.frontier), l.start_position
      FROM ledger_tree l
      LEFT JOIN LATERAL (SELECT k.tree_size, k.frontier FROM ledger_ticks k
                          WHERE k.tree_size IS NOT NULL ORDER BY k.tick DESC LIMIT 1) t ON true
     WHERE l.id = 1
$$;

CREATE OR REPLACE FUNCTION outcomes_sequence(p_wait boolean) RETURNS integer
LANGUAGE plpgsql SET enable_seqscan = off AS $$
DECLARE
    tick_number bigint;
    previous pg_snapshot;
    current_snapshot pg_snapshot;
    head_position bigint;
    link text;
    n integer := 0;
    r record;
    leaves text[] := '{}';
    size bigint;
    front bytea;
    first_leaf bigint;
    above bigint;
    given bigint;
    fresh boolean := pg_current_xact_id_if_assigned() IS NULL;  -- (the bound, above)
BEGIN
    IF p_wait THEN
        PERFORM pg_advisory_xact_lock(8031453480971759982);
    ELSIF NOT pg_try_advisory_xact_lock(8031453480971759982) THEN
        RETURN -1;
    END IF;
    SELECT a.tick, a.snapshot, a.head, a.head_hash, a.unsequenced_above
      INTO tick_number, previous, head_position, link, above
      FROM outcomes_sequencer_at() a;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'the ledger has no sequencer row: run `outcomes migrate`'
            USING ERRCODE = 'undefined_object';
    END IF;
    -- The last position given out, before this transaction takes its id (the bound, above).
    -- The function, not a scan of the sequence: under enable_seqscan = off that scan's cost
    -- set off JIT (60 ms a tick).
    IF fresh THEN
        given := coalesce(pg_sequence_last_value('events_position_seq'::regclass), 0);
    END IF;
    current_snapshot := pg_current_snapshot();
    FOR r IN
        SELECT u.event_position, u.hash
          FROM outcomes_unsequenced(previous, current_snapshot, above) u
         ORDER BY u.event_position
    LOOP
        head_position := head_position + 1;
        link := encode(sha256(convert_to(coalesce(link, '') || ':' || r.hash, 'UTF8')), 'hex');
        INSERT INTO ledger_order (position, event_position, ledger_hash, sequenced_at)
        VALUES (head_position, r.event_position, link, clock_timestamp());
        n := n + 1;
        leaves[n] := r.hash;
    END LOOP;
    IF n = 0 THEN
        -- Nothing new: the previous snapshot still bounds what is left, so it stays (a tick
        -- that finds nothing writes nothing, and an idle ledger's ticks cost one index probe).
        RETURN 0;
    END IF;
    SELECT t.tree_size, t.frontier, t.start_position INTO size, front, first_leaf
      FROM outcomes_tree_at() t;
    IF NOT FOUND OR first_leaf + size <> head_position - n + 1 THEN
        RAISE EXCEPTION 'the Merkle tree (% leaves from position %) does not end where the '
                        'ledger did (position %)', size, first_leaf, head_position - n
            USING ERRCODE = 'data_corrupted';
    END IF;
    SELECT e.tree_size, e.frontier INTO size, front FROM outcomes_tree_extend(size, front, leaves) e;
    -- The next tick's bound: the position given before the newest kept tick whose id is below
    -- this snapshot's xmin (never this tick: it took its id after the snapshot), else the last.
    above := greatest(above, (
        SELECT t.position_given FROM ledger_ticks t
         WHERE t.tick_xid < pg_snapshot_xmin(current_snapshot)::text::bigint
         ORDER BY t.tick DESC LIMIT 1));
    INSERT INTO ledger_ticks (tick, head, head_hash, snapshot, ticked_at, tree_size, frontier,
                              position_given, tick_xid, unsequenced_above)
    VALUES (tick_number + 1, head_position, link, current_snapshot::text, clock_timestamp(),
            size, front, given,
            CASE WHEN fresh THEN pg_current_xact_id()::text::bigint END, above);
    -- One row out by its key, never a range: a range would walk the dead rows a transaction
    -- held open keeps.
    DELETE FROM ledger_ticks WHERE ledger_ticks.tick = tick_number + 1 - 100;
    RETURN n;
END $$;

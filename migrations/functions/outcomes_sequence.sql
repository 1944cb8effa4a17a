-- outcomes_sequence: one tick of the sequencer (ledger/services/sequencer.py, the store's
-- `sequence`). Writers commit without a ledger-wide lock, so positions they take at insert are
-- not in commit order; the sequencer gives every committed event its dense ledger position and
-- its ledger-wide link (`ledger_order`), in the manner of PgQ's ticks: a tick takes the
-- database's snapshot, and its events are those whose transaction is visible in it and was not
-- in the previous tick's (`ledger_sequencer.snapshot`), in write order. A transaction that
-- commits later is in a later tick, so a reader that has seen a position never sees an event
-- appear before it; a transaction held open delays only its own events, never the others'.
-- Ticks exclude each other with a transaction-level lock: p_wait waits for it (a reader that
-- wants the events committed before it asked), else a tick already under way answers -1.
-- This file is the functions as the newest migration creates them; that migration runs its copy.
--
-- outcomes_unsequenced: the events a tick after `p_after` up to `p_upto` gives positions to —
-- of the transactions visible in `p_upto` and not in `p_after` (at or past its xmax, or in
-- progress in it), without an order row yet. The tick and the sequencer's lag both ask it.
CREATE OR REPLACE FUNCTION outcomes_unsequenced(p_after pg_snapshot, p_upto pg_snapshot)
RETURNS TABLE (event_position bigint, hash text, recorded_at timestamptz)
LANGUAGE sql STABLE AS $$
    SELECT e.position, e.hash, e.recorded_at FROM events e
     WHERE (e.txid >= pg_snapshot_xmax(p_after)
            OR e.txid = ANY (ARRAY(SELECT pg_snapshot_xip(p_after))))
       AND pg_visible_in_snapshot(e.txid, p_upto)
       -- Never true but for a row someone placed by hand: it keeps its place, and
       -- `audit verify` judges it.
       AND NOT EXISTS (SELECT 1 FROM ledger_order o WHERE o.event_position = e.position)
$$;

CREATE OR REPLACE FUNCTION outcomes_sequence(p_wait boolean) RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    previous pg_snapshot;
    current_snapshot pg_snapshot;
    head_position bigint;
    link text;
    n integer := 0;
    r record;
BEGIN
    IF p_wait THEN
        PERFORM pg_advisory_xact_lock(8031453480971759982);
    ELSIF NOT pg_try_advisory_xact_lock(8031453480971759982) THEN
        RETURN -1;
    END IF;
    SELECT s.snapshot::pg_snapshot, s.head, s.head_hash INTO previous, head_position, link
      FROM ledger_sequencer s WHERE s.id = 1;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'the ledger has no sequencer row: run `outcomes migrate`'
            USING ERRCODE = 'undefined_object';
    END IF;
    current_snapshot := pg_current_snapshot();
    FOR r IN
        SELECT u.event_position, u.hash FROM outcomes_unsequenced(previous, current_snapshot) u
         ORDER BY u.event_position
    LOOP
        head_position := head_position + 1;
        link := encode(sha256(convert_to(coalesce(link, '') || ':' || r.hash, 'UTF8')), 'hex');
        INSERT INTO ledger_order (position, event_position, ledger_hash, sequenced_at)
        VALUES (head_position, r.event_position, link, clock_timestamp());
        n := n + 1;
    END LOOP;
    IF n = 0 THEN
        -- Nothing new: the previous snapshot still bounds what is left, so it stays (a tick
        -- that finds nothing writes nothing, and an idle ledger's ticks cost one index probe).
        RETURN 0;
    END IF;
    UPDATE ledger_sequencer
       SET snapshot = current_snapshot::text, head = head_position, head_hash = link,
           ticks = ticks + 1, ticked_at = clock_timestamp()
     WHERE id = 1;
    RETURN n;
END $$;

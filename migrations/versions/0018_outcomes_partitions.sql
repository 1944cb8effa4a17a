-- outcomes_make_partitions: the partitions of `events` and `ledger_order` made ahead of the
-- writers (migration 0018). Both tables are partitioned by range of the write position
-- (`events.position`, `ledger_order.event_position`) with the same bounds, so a range's events
-- and their order rows are archived and dropped together (`outcomes archive`). Partitions are
-- made here, never on the write path: `outcomes migrate` and the sequencer's leader call it now
-- and then, so that at least `p_ahead` empty partitions lie above the newest write position. A
-- write past the last one fails with "no partition" (the store's NoPartitionError).
--
-- The application role may not run DDL, so the function runs as its owner (SECURITY DEFINER,
-- with the search path pinned at creation). Each partition is built alone and then attached:
-- ATTACH takes a lock on the parent that writers and readers do not wait for (CREATE TABLE …
-- PARTITION OF would take one they all queue behind). The partition size is the ledger's
-- (`ledger_meta.partition_size`, set by `outcomes migrate`), never the caller's.
--
-- Postgres keeps a unique index global only when it holds the partition key, so the three
-- rules the unique indexes kept before 0018 — one event per (stream, version), one row per
-- event id, one terminal event per job stream — are each partition's unique indexes here, a
-- guard within a partition; across partitions the writers check them under the stream's lock
-- (outcomes_append_jobs, the store's single-stream append). docs/integrity.md says what that
-- leaves open. This file is the functions as the newest migration creates them; that
-- migration runs its copy.

-- The newest write position handed out (0 before the first event).
CREATE OR REPLACE FUNCTION outcomes_written_position() RETURNS bigint
LANGUAGE sql STABLE AS $$
    SELECT CASE WHEN s.is_called THEN s.last_value ELSE s.last_value - 1 END
      FROM events_position_seq s
$$;

-- How many partitions lie wholly above the newest write position (what operators watch:
-- `outcomes status`, /metrics). One index read of a small table.
CREATE OR REPLACE FUNCTION outcomes_partitions_ahead() RETURNS integer
LANGUAGE sql STABLE AS $$
    SELECT count(*)::integer FROM ledger_partitions p
     WHERE p.lower > outcomes_written_position()
$$;

-- One partition of each table for [p_lower, p_upper), with each partition's guards. Not a
-- definer's function: only the owner (through outcomes_make_partitions, or an archive) may.
CREATE OR REPLACE FUNCTION outcomes_add_partition(p_lower bigint, p_upper bigint)
RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    ev text := 'events_p' || p_lower;
    ord text := 'ledger_order_p' || p_lower;
BEGIN
    EXECUTE format('CREATE TABLE %I (LIKE events INCLUDING CONSTRAINTS)', ev);
    PERFORM outcomes_partition_guards(ev);
    EXECUTE format('ALTER TABLE events ATTACH PARTITION %I FOR VALUES FROM (%s) TO (%s)',
                   ev, p_lower, p_upper);
    EXECUTE format('CREATE TABLE %I (LIKE ledger_order INCLUDING CONSTRAINTS)', ord);
    PERFORM outcomes_partition_guards(ord);
    EXECUTE format('ALTER TABLE ledger_order ATTACH PARTITION %I FOR VALUES FROM (%s) TO (%s)',
                   ord, p_lower, p_upper);
    INSERT INTO ledger_partitions (lower, upper, created_at)
    VALUES (p_lower, p_upper, clock_timestamp());
END $$;

-- The unique indexes one partition keeps (named after it: `<partition>_<rule>`, which the
-- store's error translation reads back).
CREATE OR REPLACE FUNCTION outcomes_partition_guards(p_table text) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    IF p_table LIKE 'ledger_order%' THEN
        EXECUTE format('CREATE UNIQUE INDEX %I ON %I (position)', p_table || '_position', p_table);
        RETURN;
    END IF;
    EXECUTE format('CREATE UNIQUE INDEX %I ON %I (stream_id, stream_version)',
                   p_table || '_stream_version', p_table);
    EXECUTE format('CREATE UNIQUE INDEX %I ON %I (event_id)', p_table || '_event_id', p_table);
    EXECUTE format('CREATE UNIQUE INDEX %I ON %I (stream_id) WHERE type IN (''job.outcome_missing'', ''job.refused'', ''work.declined'', ''work.failed'', ''work.halted'', ''work.partial'', ''work.succeeded'')',
                   p_table || '_one_terminal', p_table);
END $$;

CREATE OR REPLACE FUNCTION outcomes_make_partitions(p_ahead integer) RETURNS integer
LANGUAGE plpgsql SECURITY DEFINER SET search_path FROM CURRENT
-- Never a long wait behind an archive's or a migration's lock: the next call makes them.
SET lock_timeout = '5s' AS $$
DECLARE
    size bigint;
    written bigint;
    top bigint;
    made integer := 0;
BEGIN
    IF p_ahead IS NULL OR p_ahead < 1 OR p_ahead > 100 THEN
        RAISE EXCEPTION 'partitions ahead must be from 1 to 100, got %', p_ahead
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    -- One maker at a time ("outc" "part"); the others find the work done.
    PERFORM pg_advisory_xact_lock(8031453481005035124);
    SELECT m.value::bigint INTO size FROM ledger_meta m WHERE m.key = 'partition_size';
    IF size IS NULL OR size < 1 THEN
        RAISE EXCEPTION 'the ledger has no partition size: run `outcomes migrate`'
            USING ERRCODE = 'undefined_object';
    END IF;
    written := outcomes_written_position();
    SELECT greatest(coalesce(max(p.upper), 1),
                    coalesce((SELECT max(a.write_to) FROM archives a), 1))
      INTO top FROM ledger_partitions p;
    WHILE top <= written
          OR (SELECT count(*) FROM ledger_partitions p WHERE p.lower > written) < p_ahead LOOP
        PERFORM outcomes_add_partition(top, top + size);
        top := top + size;
        made := made + 1;
    END LOOP;
    RETURN made;
END $$;

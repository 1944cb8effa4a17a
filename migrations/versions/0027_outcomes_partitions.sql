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
-- leaves open. This file is the functions as the newest migration creates them (0027, which
-- makes the windows of `jobs` apart from the partitions of `events`; 0026 shortened the maker's
-- lock timeout; 0020 added the jobs' partitions below); that migration runs its copy.

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
    IF p_table LIKE 'jobs%' THEN  -- 0020: one idempotency key per account, in each partition
        EXECUTE format('CREATE UNIQUE INDEX %I ON %I (account, idempotency_key)',
                       p_table || '_idempotency', p_table);
        RETURN;
    END IF;
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

-- The jobs' partitions (migration 0020). `jobs` (the read model, the largest table) is
-- partitioned by range of `job_id` (collation "C"): job ids are UUIDv7 (ledger/uuid7.py), whose
-- text begins with the creation time in milliseconds, so a range of ids is a window of creation
-- time, `ledger_meta.jobs_partition_ms` long (OUTCOMES_JOBS_PARTITION_HOURS at the migration,
-- 24 by default), aligned on multiples of it since 1970. An archive drops a window's partition
-- once every job in it is archived, and deletes the few archived rows of the others.
-- Random (v4) ids made before UUIDv7, and any id no window takes, fall in fixed partitions:
-- `jobs_legacy_low` (below the first window), `jobs_legacy_high` (ids from '04', the year 2109
-- in UUIDv7 time: no window is made past it) and `jobs_default` (DEFAULT: what lies between,
-- never dropped). docs/archive.md says why these bounds.

-- A window's bound as id text: its 48-bit millisecond time, as the first 12 hex digits of a
-- UUIDv7 ('01890a5d-ac96'): every id made in that millisecond or later sorts at or above it.
CREATE OR REPLACE FUNCTION outcomes_job_id_bound(p_ms bigint) RETURNS text
LANGUAGE sql IMMUTABLE AS $$
    SELECT substr(lpad(to_hex(p_ms), 12, '0'), 1, 8) || '-' || substr(lpad(to_hex(p_ms), 12, '0'), 9, 4)
$$;

-- One partition of `jobs` for ids made in [p_lower, p_upper) ms. Rows the default partition took
-- in that range (ids made while no window was there yet) move into it first, uncounted: they
-- were counted where they were. Not a definer's function: only the owner (through
-- outcomes_make_jobs_partitions, or a migration) may.
CREATE OR REPLACE FUNCTION outcomes_add_jobs_partition(p_lower bigint, p_upper bigint)
RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    part text := 'jobs_t' || p_lower;
    lo text := outcomes_job_id_bound(p_lower);
    hi text := outcomes_job_id_bound(p_upper);
    recounting text := current_setting('outcomes.recounting', true);
BEGIN
    EXECUTE format('CREATE TABLE %I (LIKE jobs INCLUDING DEFAULTS INCLUDING CONSTRAINTS)', part);
    PERFORM outcomes_partition_guards(part);
    IF to_regclass('jobs_default') IS NOT NULL
       AND EXISTS (SELECT 1 FROM jobs_default d WHERE d.job_id >= lo AND d.job_id < hi) THEN
        PERFORM set_config('outcomes.recounting', 'on', true);
        EXECUTE format('WITH moved AS (DELETE FROM jobs_default d WHERE d.job_id >= %L'
                       ' AND d.job_id < %L RETURNING d.*) INSERT INTO %I SELECT * FROM moved',
                       lo, hi, part);
        PERFORM set_config('outcomes.recounting', coalesce(recounting, ''), true);
    END IF;
    EXECUTE format('ALTER TABLE jobs ATTACH PARTITION %I FOR VALUES FROM (%L) TO (%L)',
                   part, lo, hi);
    INSERT INTO jobs_partitions (lower_ms, upper_ms, created_at)
    VALUES (p_lower, p_upper, clock_timestamp());
END $$;

-- Windows of `jobs` made ahead: the current one and `p_ahead` after it (one a day at the
-- default). A maker that fell behind starts again at the current window (ids made in the gap
-- stay in the default partition); none is made past the legacy bound ('04', 2109).
CREATE OR REPLACE FUNCTION outcomes_make_jobs_partitions(p_ahead integer) RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    size bigint;
    now_ms bigint := floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint;
    horizon bigint := x'040000000000'::bigint;
    top bigint;
    target bigint;
    made integer := 0;
BEGIN
    SELECT m.value::bigint INTO size FROM ledger_meta m WHERE m.key = 'jobs_partition_ms';
    IF size IS NULL OR to_regclass('jobs_partitions') IS NULL THEN
        RETURN 0;  -- a ledger before 0020
    END IF;
    SELECT max(p.upper_ms) INTO top FROM jobs_partitions p;
    top := greatest(coalesce(top, 0), (now_ms / size) * size);
    target := least((now_ms / size + 1 + p_ahead) * size, horizon);
    WHILE top + size <= target LOOP
        PERFORM outcomes_add_jobs_partition(top, top + size);
        top := top + size;
        made := made + 1;
    END LOOP;
    RETURN made;
END $$;

-- How many windows of `jobs` lie wholly ahead of now (what operators watch, beside
-- outcomes_partitions_ahead).
CREATE OR REPLACE FUNCTION outcomes_jobs_partitions_ahead() RETURNS integer
LANGUAGE sql STABLE AS $$
    SELECT count(*)::integer FROM jobs_partitions p
     WHERE p.dropped_at IS NULL
       AND p.lower_ms > floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint
$$;

CREATE OR REPLACE FUNCTION outcomes_make_partitions(p_ahead integer) RETURNS integer
LANGUAGE plpgsql SECURITY DEFINER SET search_path FROM CURRENT
-- Never a long wait behind another transaction's lock: the next call makes them (the leader
-- calls every 10 s, and keeps several ahead). Attaching a window of `jobs` locks its default
-- partition exclusively, and every query on `jobs` queues behind that request while it waits:
-- during a rebuild at 1M jobs, whose pages hold the partition for seconds, each attempt stopped
-- every agent's call for up to the 5 s this was (0026: 50 ms).
SET lock_timeout = '50ms' AS $$
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
    -- The windows of `jobs` apart (0027): attaching one needs `jobs_default` exclusively, which
    -- any open reader of `jobs` holds (an `audit verify` reads in one snapshot for minutes, hours
    -- at 100M jobs). Without a window a new job lands in the default partition and moves into
    -- its window once made; without a partition of `events` a write fails. So a lock not had
    -- here gives up the windows alone, and the partitions of `events` made above stay made.
    BEGIN
        made := made + outcomes_make_jobs_partitions(p_ahead);
    EXCEPTION WHEN lock_not_available THEN
        NULL;  -- the next call makes them
    END;
    RETURN made;
END $$;

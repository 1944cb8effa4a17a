-- outcomes_append_jobs: a batch of job appends in one call (the store's write lane on
-- Postgres, called by ledger/persistence/job_batch.py). This file is the function as the
-- newest migration creates it, whole; each migration that changes it keeps its own copy
-- (migrations/versions/NNNN_outcomes_append_jobs.sql), and tests/persistence/test_append_function.py checks that the
-- newest copy is this file. To change the function: edit this file, copy it into a new
-- migration's snapshot, and run that snapshot in the migration.
--
-- Writers commit concurrently (0014): no lock is held by every writer. Each call takes, in one
-- order (so two calls never wait on each other in a circle): the brakes lock, shared, for a
-- claim or a submit that checks brakes (a pull or a release takes it exclusive); the append
-- lock, shared (only a read-model rebuild takes it exclusive); then, sorted by key, each item's
-- stream (exclusive), its new job's idempotency key (exclusive), its new job's quota
-- (exclusive: account and tool, as the locked count took it before 0016) and its token's
-- stream (shared: a revocation appends to it). Ledger positions and the ledger-wide chain are given
-- after commit by the sequencer (`outcomes_sequence`); the positions answered here are the
-- rows' write positions.
--
-- Per item, in order: the submitting token exists and is not revoked (a token admitted from an API
-- process's cache is re-checked here, with the decision: 'revoked'); the stream's head is the
-- one the writer folded from ('conflict'); no brake in the item's scopes holds ('braked'); a
-- terminal event is the stream's first ('terminal'); no event id was recorded before
-- ('duplicate'); a new job's idempotency key is free ('idempotency', answered with the
-- holder's view); a new job's quota has room: fewer than its limit of the account's jobs of
-- the tool accepted in the window ('quota', answered with the oldest one's creation). Then
-- the events, the read-model row, the lease and the notification.
--
-- Since 0024 the function runs with `enable_seqscan = off`: every lookup in it is by a key an
-- index holds, and its plans are cached per session. A plan made while the newest partition was
-- small (just made, or VACUUMed empty) scanned that partition whole, and kept scanning it at
-- each lookup as it grew, until something invalidated the plan (a ledger VACUUMed empty and
-- grown by 10k calls: an agent's p50 15 -> 56 ms; a 1M fill went from about 40k jobs a minute
-- to about 1k past 700k).
--
-- Since 0025 a job stream's lookups read only the partitions its events can be in. Each lookup
-- over every partition of `events` descends one index per partition (at 30 partitions an
-- agent's p99 was 2.1x and a write 2x an unpartitioned ledger's). A job's events are written
-- with its jobs row, in this function or the single-stream append, under the stream's lock;
-- the row keeps where the stream's events begin (`first_position`, the write position of its
-- first event: positions grow within a stream, as each append waits for the one before). So:
-- no jobs row, no events (a new job's head is 0 without a look at `events`); else the head,
-- the terminal event and the event ids are looked for from `first_position` on (a row from
-- before 0025, or one a rebuild inserted, has none: from 0, every partition, as before). A
-- retried write's events are in its own stream, which is what the duplicate check is for; an
-- id reused across streams is a bug or an attack (docs/integrity.md). The token's revocation
-- is read from `tokens`, written with the token's events under the token's stream lock (and
-- never "not revoked" against them: a trigger refuses it).
-- And its plans are generic (`plan_cache_mode`): PL/pgSQL's plan cache otherwise planned
-- each lookup on a partitioned table again at every call (a generic plan's estimate counts every
-- partition, though the executor prunes those below the bound), and the planning cost more than
-- the lookups: at 30 partitions a call of 100 items took 51 ms planned each time, 37 ms with
-- generic plans (and 31 ms on an empty ledger of 5 partitions). `enable_seqscan = off` keeps a
-- generic plan made on a small partition an index lookup (0024), and no lookup here is worth
-- starting parallel workers for (the sequencer's tick was, before 0025: outcomes_sequence.sql).
CREATE OR REPLACE FUNCTION outcomes_append_jobs(p_items jsonb) RETURNS jsonb
LANGUAGE plpgsql SET enable_seqscan = off SET plan_cache_mode = force_generic_plan
SET max_parallel_workers_per_gather = 0 AS $$
DECLARE
    n_items integer := coalesce(jsonb_array_length(p_items), 0);
    n_events integer;
    item jsonb;
    item_events jsonb;
    ev jsonb;
    job jsonb;
    lease jsonb;
    results jsonb[] := '{}';
    stream text;
    head_version integer;
    head_hash text;
    found text;
    found_view jsonb;
    quota jsonb;
    quota_count bigint;
    quota_oldest timestamptz;
    quota_since timestamptz;
    key_tool text;
    key_account text;
    key_value text;
    held jsonb;
    held_for jsonb;  -- the scopes `held` answers for (NULL: ask again)
    head_type text;
    pos bigint;
    positions bigint[];
    closing boolean;
    revoked boolean;
    revoked_for text;  -- the token `revoked` answers for (NULL: ask again)
    first_pos bigint;  -- the job stream's first write position (0: unknown, look everywhere)
    job_known boolean;  -- the job has a jobs row, so its stream has events
    key_lock record;
BEGIN
    -- The brakes lock first, in the order `brake pull` takes its locks (no deadlock).
    FOR i IN 0 .. n_items - 1 LOOP
        IF (p_items->i->>'brakes_lock')::boolean
           OR jsonb_typeof(p_items->i->'brake_scopes') = 'array' THEN
            PERFORM pg_advisory_xact_lock_shared(8031453480687395179);
            EXIT;
        END IF;
    END LOOP;
    PERFORM pg_advisory_xact_lock_shared(8031453480670490724);
    -- Then every key of the call, once each, in key order.
    FOR key_lock IN
        SELECT k.key, bool_and(k.shared) AS shared FROM (
            SELECT outcomes_lock_key(ARRAY['stream', it->>'stream_id']) AS key, false AS shared
              FROM jsonb_array_elements(p_items) it
            UNION ALL
            SELECT outcomes_lock_key(ARRAY['idempotency', it->'job'->>'account',
                                           it->'job'->>'idempotency_key']), false
              FROM jsonb_array_elements(p_items) it
             WHERE it->'job'->>'idempotency_key' IS NOT NULL
               AND (it->'events'->0->>'stream_version')::integer = 1  -- a new job's key
            UNION ALL
            SELECT outcomes_lock_key(ARRAY['quota', it->'job'->>'account', it->'job'->>'tool']),
                   false
              FROM jsonb_array_elements(p_items) it
             WHERE jsonb_typeof(it->'quota') = 'object'
            UNION ALL
            SELECT outcomes_lock_key(ARRAY['stream', 'token-' || (it->>'token_id')]), true
              FROM jsonb_array_elements(p_items) it
             WHERE it->>'token_id' IS NOT NULL
        ) k GROUP BY k.key ORDER BY k.key
    LOOP
        IF key_lock.shared THEN
            PERFORM pg_advisory_xact_lock_shared(key_lock.key);
        ELSE
            PERFORM pg_advisory_xact_lock(key_lock.key);
        END IF;
    END LOOP;
    FOR i IN 0 .. n_items - 1 LOOP
        item := p_items->i;
        stream := item->>'stream_id';
        job := item->'job';
        item_events := item->'events';
        IF item->>'token_id' IS NOT NULL THEN
            -- Under the token's lock a revocation is in or out for the whole call: asked once
            -- per token.
            IF revoked_for IS DISTINCT FROM item->>'token_id' THEN
                revoked_for := item->>'token_id';
                -- Its row: revoked, or none at all (no such token).
                SELECT coalesce(bool_or(t.revoked), true) INTO revoked
                  FROM tokens t WHERE t.token_id = revoked_for;
            END IF;
            IF revoked THEN
                results := results || jsonb_build_object('status', 'revoked');
                CONTINUE;
            END IF;
        END IF;
        IF stream = 'job-' || (job->>'job_id') THEN
            SELECT coalesce(j.first_position, 0) INTO first_pos FROM jobs j
             WHERE j.job_id = job->>'job_id';
            job_known := first_pos IS NOT NULL;  -- NULL: no row (`found` is a variable here)
        ELSE  -- not the job's own stream (no writer sends one): every partition, as before
            first_pos := 0;
            job_known := true;
        END IF;
        head_version := 0;
        head_hash := NULL;
        head_type := NULL;
        IF job_known THEN
            SELECT e.stream_version, e.hash, e.type INTO head_version, head_hash, head_type
              FROM events e WHERE e.stream_id = stream AND e.position >= first_pos
             ORDER BY e.stream_version DESC LIMIT 1;
            head_version := coalesce(head_version, 0);
        END IF;
        ev := item_events->0;
        IF head_version <> (ev->>'stream_version')::integer - 1
           OR head_hash IS DISTINCT FROM ev->>'prev_hash' THEN
            results := results || jsonb_build_object('status', 'conflict', 'version', head_version);
            CONTINUE;
        END IF;
        IF jsonb_typeof(item->'brake_scopes') = 'array' THEN
            -- The brakes cannot change under the brakes lock but by this call's own events
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
            IF item_events->k->>'type' IN ('job.outcome_missing', 'job.refused', 'work.declined', 'work.failed', 'work.halted', 'work.partial', 'work.succeeded') THEN
                closing := true;
            END IF;
        END LOOP;
        IF closing AND job_known THEN
            IF EXISTS (SELECT 1 FROM events e
                        WHERE e.stream_id = stream AND e.position >= first_pos AND e.type IN ('job.outcome_missing', 'job.refused', 'work.declined', 'work.failed', 'work.halted', 'work.partial', 'work.succeeded')) THEN
                results := results || jsonb_build_object('status', 'terminal');
                CONTINUE;
            END IF;
        END IF;
        found := NULL;
        FOR k IN 0 .. n_events - 1 LOOP
            EXIT WHEN NOT job_known;  -- a new stream: a retry of its first write found its row
            SELECT 'duplicate' INTO found FROM events e
             WHERE e.event_id = (item_events->k->>'event_id')::uuid  -- one probe a partition
               AND e.position >= first_pos;
            EXIT WHEN found IS NOT NULL;
        END LOOP;
        IF found IS NOT NULL THEN
            results := results || jsonb_build_object('status', 'duplicate');
            CONTINUE;
        END IF;
        IF head_version = 0 AND job->>'idempotency_key' IS NOT NULL THEN
            found := NULL;
            key_account := job->>'account';  -- plain text parameters, as the index's columns
            key_value := job->>'idempotency_key';
            -- The row comparison only the unique index can take as an index condition.
            SELECT j.job_id, j.view INTO found, found_view FROM jobs j
             WHERE j.account = key_account AND j.idempotency_key = key_value
               AND (j.account, j.idempotency_key) >= (key_account, key_value);
            IF found IS NOT NULL THEN
                results := results || jsonb_build_object('status', 'idempotency', 'job_id', found,
                                                         'view', found_view);
                CONTINUE;
            END IF;
        END IF;
        quota := item->'quota';
        IF head_version = 0 AND jsonb_typeof(quota) = 'object' THEN
            key_account := job->>'account';
            key_tool := job->>'tool';
            quota_since := (quota->>'since')::timestamptz;
            -- Under the quota's lock: the jobs this call wrote before are counted too. The row
            -- comparison only `ix_jobs_quota` can take as an index condition (planned on an
            -- empty table, the plain one walked the account's jobs by another index).
            SELECT count(*), min(j.created_at) INTO quota_count, quota_oldest FROM jobs j
             WHERE j.account = key_account AND j.tool = key_tool AND j.accepted
               AND j.created_at > quota_since
               AND (j.account, j.tool, j.created_at) > (key_account, key_tool, quota_since);
            IF quota_count >= (quota->>'limit')::integer THEN
                results := results || jsonb_build_object('status', 'quota',
                                                         'oldest', quota_oldest);
                CONTINUE;
            END IF;
        END IF;
        positions := '{}';
        FOR k IN 0 .. n_events - 1 LOOP
            ev := item_events->k;
            INSERT INTO events (stream_id, stream_version, event_id, type, data, code, actor,
                                recorded_at, prev_hash, hash)
            VALUES (stream, (ev->>'stream_version')::integer, (ev->>'event_id')::uuid,
                    ev->>'type', ev->'data', ev->>'code', ev->>'actor',
                    (ev->>'recorded_at')::timestamptz, ev->>'prev_hash', ev->>'hash')
            RETURNING position INTO pos;
            positions := positions || pos;
            -- A pull, or an event after a pull in its stream, changes which brakes hold.
            IF ev->>'type' = 'brake.pulled' OR head_type = 'brake.pulled' THEN
                held_for := NULL;
            END IF;
        END LOOP;
        INSERT INTO jobs AS j (job_id, account, tool, status, terminal, accepted, spends,
                               attempts, code, idempotency_key, ledger_position, created_at,
                               updated_at, lease_expires_at, due_at, view, first_position)
        VALUES (job->>'job_id', job->>'account', job->>'tool', job->>'status',
                (job->>'terminal')::boolean, (job->>'accepted')::boolean,
                (job->>'spends')::boolean, (job->>'attempts')::integer, job->>'code',
                job->>'idempotency_key', pos, (job->>'created_at')::timestamptz,
                (job->>'updated_at')::timestamptz, (job->>'lease_expires_at')::timestamptz,
                (job->>'due_at')::timestamptz,
                jsonb_set(job->'view', '{ledger_position}', to_jsonb(pos)),
                CASE WHEN job_known THEN NULL ELSE positions[1] END)
        ON CONFLICT (job_id) DO UPDATE SET
            account = EXCLUDED.account, tool = EXCLUDED.tool, status = EXCLUDED.status,
            terminal = EXCLUDED.terminal, accepted = EXCLUDED.accepted,
            spends = EXCLUDED.spends, attempts = EXCLUDED.attempts, code = EXCLUDED.code,
            idempotency_key = EXCLUDED.idempotency_key,
            ledger_position = EXCLUDED.ledger_position, created_at = EXCLUDED.created_at,
            updated_at = EXCLUDED.updated_at, lease_expires_at = EXCLUDED.lease_expires_at,
            due_at = EXCLUDED.due_at, view = EXCLUDED.view;
        lease := item->'lease';
        IF lease->>'op' = 'start' THEN
            INSERT INTO leases (job_id, attempt, worker, expires_at)
            VALUES (job->>'job_id', (lease->>'attempt')::integer, lease->>'worker',
                    (lease->>'expires_at')::timestamptz)
            ON CONFLICT (job_id) DO UPDATE SET attempt = EXCLUDED.attempt,
                worker = EXCLUDED.worker, expires_at = EXCLUDED.expires_at;
        ELSIF lease->>'op' = 'drop' THEN
            DELETE FROM leases
             WHERE job_id = job->>'job_id' AND attempt = (lease->>'attempt')::integer;
        END IF;
        IF coalesce((item->>'notify')::boolean, true) THEN
            -- A job that ended is marked ('!'): waiters for an outcome wake for it alone.
            PERFORM pg_notify('outcomes_jobs',
                              job->>'job_id' || CASE WHEN closing THEN '!' ELSE '' END);
        END IF;
        results := results || jsonb_build_object('status', 'ok', 'positions', to_jsonb(positions));
    END LOOP;
    RETURN to_jsonb(results);
END $$;

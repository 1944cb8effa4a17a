-- The kept counts on Postgres (migrations 0017, 0028; ledger/persistence/sql_counts.py reads them).
-- This file is the functions as the newest migration creates them, whole; that migration runs
-- its own copy (migrations/versions/NNNN_outcomes_counts.sql), and
-- tests/persistence/test_kept_counts_sql.py checks that the newest copy is this file.
--
-- What a GROUP BY over `jobs` (and over the reconciler's finding events) answers is kept as
-- rows change, so that no summary, scrape or status counts every job. Writers commit side by
-- side (no ledger-wide lock, 0014): a total that every writer updated in place would queue every
-- commit of a group behind its row lock. So a writer only inserts delta rows, in its own
-- transaction, from triggers (`job_count_deltas`, `finding_count_deltas`: no key, no index);
-- `outcomes_compact_counts()` folds them into the totals; a reader sums totals and the deltas
-- not yet folded in one statement, which is exact at that statement's snapshot: a fold deletes
-- the deltas it adds to the totals in one transaction, so a snapshot sees each delta once.
--
-- outcomes_count_job: a jobs row inserted (+1 to its group), updated to another group, or
-- deleted (-1). A change of status (and code) alone, the common case, is one row (migration
-- 0028): +1 to its new group and -1 to `from_status`/`from_code`, the group it left, which is
-- the same hour, account, tool and acceptance; any other change is two rows, -1 and +1. Its
-- triggers skip the rows a rebuild rewrites (`outcomes.recounting` on for its transaction):
-- the rebuild counts the new rows whole (`outcomes_recount()`).
CREATE OR REPLACE FUNCTION outcomes_count_job() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        INSERT INTO job_count_deltas (hour, account, tool, accepted, status, code, jobs)
        VALUES (floor(extract(epoch FROM NEW.created_at) / 3600)::bigint, NEW.account,
                NEW.tool, NEW.accepted, NEW.status, coalesce(NEW.code, ''), 1);
    ELSIF TG_OP = 'UPDATE'
          AND floor(extract(epoch FROM OLD.created_at) / 3600)
              = floor(extract(epoch FROM NEW.created_at) / 3600)
          AND OLD.account = NEW.account AND OLD.tool = NEW.tool
          AND OLD.accepted = NEW.accepted THEN
        INSERT INTO job_count_deltas (hour, account, tool, accepted, status, code, from_status,
                                      from_code, jobs)
        VALUES (floor(extract(epoch FROM NEW.created_at) / 3600)::bigint, NEW.account,
                NEW.tool, NEW.accepted, NEW.status, coalesce(NEW.code, ''), OLD.status,
                coalesce(OLD.code, ''), 1);
    ELSIF TG_OP = 'UPDATE' THEN
        INSERT INTO job_count_deltas (hour, account, tool, accepted, status, code, jobs)
        VALUES (floor(extract(epoch FROM OLD.created_at) / 3600)::bigint, OLD.account,
                OLD.tool, OLD.accepted, OLD.status, coalesce(OLD.code, ''), -1),
               (floor(extract(epoch FROM NEW.created_at) / 3600)::bigint, NEW.account,
                NEW.tool, NEW.accepted, NEW.status, coalesce(NEW.code, ''), 1);
    ELSE
        INSERT INTO job_count_deltas (hour, account, tool, accepted, status, code, jobs)
        VALUES (floor(extract(epoch FROM OLD.created_at) / 3600)::bigint, OLD.account,
                OLD.tool, OLD.accepted, OLD.status, coalesce(OLD.code, ''), -1);
    END IF;
    RETURN NULL;
END $$;

-- outcomes_count_finding: one of the reconciler's findings recorded (its trigger's WHEN keeps
-- every other event out without a call). Its cause as ledger.event_log.finding_cause reads it:
-- the error's cause, else a re-dispatch's evidence, else the dispatch deadline.
CREATE OR REPLACE FUNCTION outcomes_count_finding() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO finding_count_deltas (type, cause, events, last_at)
    VALUES (NEW.type,
            coalesce(nullif(NEW.data -> 'error' ->> 'cause', ''),
                     nullif(NEW.data ->> 'evidence', ''), 'dispatch_deadline'),
            1, NEW.recorded_at);
    RETURN NULL;
END $$;

-- outcomes_compact_counts: fold the deltas committed so far into the totals; how many delta
-- rows it folded, or -1 when another fold holds the lock (it is doing the same work). Any
-- process may run it at any time: the DELETE takes exactly the deltas its snapshot sees, and a
-- delta committed meanwhile stays for the next fold, so nothing is counted twice or lost. A
-- change of status is folded as its two sides (`moved`): +jobs to its group, -jobs to the one
-- it left.
CREATE OR REPLACE FUNCTION outcomes_compact_counts() RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    jobs_folded integer;
    findings_folded integer;
BEGIN
    IF NOT pg_try_advisory_xact_lock(8031453480703915123) THEN
        RETURN -1;
    END IF;
    WITH taken AS (
        DELETE FROM job_count_deltas
        RETURNING hour, account, tool, accepted, status, code, from_status, from_code, jobs
    ), moved AS (
        SELECT hour, account, tool, accepted, status, code, jobs FROM taken
        UNION ALL
        SELECT hour, account, tool, accepted, from_status, from_code, -jobs FROM taken
         WHERE from_status IS NOT NULL
    ), by_hour AS (
        SELECT hour, account, tool, accepted, status, code, sum(jobs) AS jobs
          FROM moved GROUP BY hour, account, tool, accepted, status, code
    ), hourly AS (
        INSERT INTO job_counts_hourly AS c (hour, account, tool, accepted, status, code, jobs)
        SELECT hour, account, tool, accepted, status, code, jobs FROM by_hour WHERE jobs <> 0
        ON CONFLICT (hour, account, tool, accepted, status, code)
        DO UPDATE SET jobs = c.jobs + EXCLUDED.jobs
    ), totals AS (
        INSERT INTO job_counts AS c (account, tool, accepted, status, code, jobs)
        SELECT account, tool, accepted, status, code, sum(jobs) FROM by_hour
         GROUP BY account, tool, accepted, status, code HAVING sum(jobs) <> 0
        ON CONFLICT (account, tool, accepted, status, code)
        DO UPDATE SET jobs = c.jobs + EXCLUDED.jobs
    )
    SELECT count(*) INTO jobs_folded FROM taken;
    WITH taken AS (
        DELETE FROM finding_count_deltas RETURNING type, cause, events, last_at
    ), totals AS (
        INSERT INTO finding_counts AS c (type, cause, events, last_at)
        SELECT type, cause, sum(events), max(last_at) FROM taken GROUP BY type, cause
        ON CONFLICT (type, cause)
        DO UPDATE SET events = c.events + EXCLUDED.events,
                      last_at = greatest(c.last_at, EXCLUDED.last_at)
    )
    SELECT count(*) INTO findings_folded FROM taken;
    RETURN jobs_folded + findings_folded;
END $$;

-- outcomes_recount: every count again from what `jobs` and `events` hold now (a migration's
-- backfill, a rebuild's last step). Its caller keeps writers out meanwhile: a rebuild holds
-- the append lock exclusive, the migration has just created the triggers (which locks both
-- tables until it commits).
CREATE OR REPLACE FUNCTION outcomes_recount() RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_advisory_xact_lock(8031453480703915123);  -- no fold meanwhile
    DELETE FROM job_count_deltas;
    DELETE FROM job_counts_hourly;
    DELETE FROM job_counts;
    INSERT INTO job_counts_hourly (hour, account, tool, accepted, status, code, jobs)
    SELECT floor(extract(epoch FROM created_at) / 3600)::bigint, account, tool, accepted,
           status, coalesce(code, ''), count(*)
      FROM jobs GROUP BY 1, 2, 3, 4, 5, 6;
    INSERT INTO job_counts (account, tool, accepted, status, code, jobs)
    SELECT account, tool, accepted, status, code, sum(jobs)
      FROM job_counts_hourly GROUP BY account, tool, accepted, status, code;
    DELETE FROM finding_count_deltas;
    DELETE FROM finding_counts;
    INSERT INTO finding_counts (type, cause, events, last_at)
    SELECT type, cause, count(*), max(recorded_at) FROM (
        SELECT e.type, coalesce(nullif(e.data -> 'error' ->> 'cause', ''),
                                nullif(e.data ->> 'evidence', ''), 'dispatch_deadline') AS cause,
               e.recorded_at
          FROM events e
         WHERE e.actor = 'reconciler'
           AND e.type IN ('job.redispatched', 'work.retry_scheduled', 'job.outcome_missing')
    ) f GROUP BY type, cause;
END $$;

"""Postgres: one server-side statement appends a batch of job events (one round trip).

`outcomes_append_jobs(items jsonb)` takes the append lock (after the brakes lock, shared, for a
claim), and for each item checks the stream's head (version and hash), the
one-terminal rule, event ids, the idempotency key and (for a submit or a claim) the brakes;
then inserts the events, upserts the job's read-model row (the view folded in Python, its
position filled in here), changes the lease, and notifies. A failed check is reported per item
(a status), never raised, so one item's conflict leaves the rest of the batch to commit. The
Python fold stays the one definition of the read model.

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-30
"""

from __future__ import annotations

from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None

# The locks' keys (ledger.persistence.sql_store, ledger.persistence.locks): "outc" "appd", "brak".
APPEND_LOCK_KEY = 8031453480670490724
BRAKE_LOCK_KEY = 8031453480687395179
TERMINAL = (
    "'job.outcome_missing', 'job.refused', 'work.declined', 'work.failed', "
    "'work.halted', 'work.partial', 'work.succeeded'"
)

# Each item's rows once its events are in: the read-model row (the view folded in Python, its
# position filled in here), the lease change and the notification. Later versions of the
# function (0008) write them with this same text.
WRITE_ROWS = """\
        INSERT INTO jobs AS j (job_id, account, tool, status, terminal, accepted, spends,
                               attempts, code, idempotency_key, ledger_position, created_at,
                               updated_at, lease_expires_at, due_at, view)
        VALUES (job->>'job_id', job->>'account', job->>'tool', job->>'status',
                (job->>'terminal')::boolean, (job->>'accepted')::boolean,
                (job->>'spends')::boolean, (job->>'attempts')::integer, job->>'code',
                job->>'idempotency_key', pos, (job->>'created_at')::timestamptz,
                (job->>'updated_at')::timestamptz, (job->>'lease_expires_at')::timestamptz,
                (job->>'due_at')::timestamptz,
                jsonb_set(job->'view', '{ledger_position}', to_jsonb(pos)))
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
            PERFORM pg_notify('outcomes_jobs', job->>'job_id');
        END IF;
"""

FUNCTION = f"""
CREATE OR REPLACE FUNCTION outcomes_append_jobs(p_items jsonb) RETURNS jsonb
LANGUAGE plpgsql AS $$
DECLARE
    item jsonb;
    ev jsonb;
    job jsonb;
    lease jsonb;
    results jsonb := '[]'::jsonb;
    stream text;
    head_version integer;
    head_hash text;
    found text;
    held jsonb;
    pos bigint;
    positions bigint[];
BEGIN
    -- A claim takes the brakes lock shared first, as `brake pull` takes it exclusive (and
    -- before the append lock, in the order `brake pull` takes them: no deadlock).
    IF EXISTS (SELECT 1 FROM jsonb_array_elements(p_items) x
                WHERE (x.value->>'brakes_lock')::boolean) THEN
        PERFORM pg_advisory_xact_lock_shared({BRAKE_LOCK_KEY});
    END IF;
    PERFORM pg_advisory_xact_lock({APPEND_LOCK_KEY});
    FOR item IN SELECT value FROM jsonb_array_elements(p_items) LOOP
        stream := item->>'stream_id';
        job := item->'job';
        head_version := NULL;
        head_hash := NULL;
        SELECT e.stream_version, e.hash INTO head_version, head_hash
          FROM events e WHERE e.stream_id = stream
         ORDER BY e.stream_version DESC LIMIT 1;
        head_version := coalesce(head_version, 0);
        ev := item->'events'->0;
        IF head_version <> (ev->>'stream_version')::integer - 1
           OR head_hash IS DISTINCT FROM ev->>'prev_hash' THEN
            results := results || jsonb_build_array(
                jsonb_build_object('status', 'conflict', 'version', head_version));
            CONTINUE;
        END IF;
        IF jsonb_typeof(item->'brake_scopes') = 'array' THEN
            SELECT jsonb_agg(b.view) INTO held FROM brakes b
             WHERE b.active AND b.scope IN
                   (SELECT jsonb_array_elements_text(item->'brake_scopes'));
            IF held IS NOT NULL THEN
                results := results || jsonb_build_array(
                    jsonb_build_object('status', 'braked', 'brakes', held));
                CONTINUE;
            END IF;
        END IF;
        IF EXISTS (SELECT 1 FROM jsonb_array_elements(item->'events') x
                    WHERE x.value->>'type' IN ({TERMINAL}))
           AND EXISTS (SELECT 1 FROM events e
                        WHERE e.stream_id = stream AND e.type IN ({TERMINAL})) THEN
            results := results || jsonb_build_array(jsonb_build_object('status', 'terminal'));
            CONTINUE;
        END IF;
        found := NULL;
        FOR ev IN SELECT x.value FROM jsonb_array_elements(item->'events') x LOOP
            SELECT 'duplicate' INTO found FROM events e
             WHERE e.event_id = (ev->>'event_id')::uuid;  -- one index probe per event
            EXIT WHEN found IS NOT NULL;
        END LOOP;
        IF found IS NOT NULL THEN
            results := results || jsonb_build_array(jsonb_build_object('status', 'duplicate'));
            CONTINUE;
        END IF;
        IF head_version = 0 AND job->>'idempotency_key' IS NOT NULL THEN
            found := NULL;
            SELECT j.job_id INTO found FROM jobs j
             WHERE j.account = job->>'account' AND j.idempotency_key = job->>'idempotency_key';
            IF found IS NOT NULL THEN
                results := results || jsonb_build_array(
                    jsonb_build_object('status', 'idempotency', 'job_id', found));
                CONTINUE;
            END IF;
        END IF;
        positions := '{{}}';
        FOR ev IN SELECT x.value FROM jsonb_array_elements(item->'events')
                  WITH ORDINALITY AS x(value, n) ORDER BY x.n LOOP
            INSERT INTO events (stream_id, stream_version, event_id, type, data, code, actor,
                                recorded_at, prev_hash, hash)
            VALUES (stream, (ev->>'stream_version')::integer, (ev->>'event_id')::uuid,
                    ev->>'type', ev->'data', ev->>'code', ev->>'actor',
                    (ev->>'recorded_at')::timestamptz, ev->>'prev_hash', ev->>'hash')
            RETURNING position INTO pos;
            positions := positions || pos;
        END LOOP;
{WRITE_ROWS}\
        results := results || jsonb_build_array(
            jsonb_build_object('status', 'ok', 'positions', to_jsonb(positions)));
    END LOOP;
    RETURN results;
END $$
"""


def upgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute(FUNCTION)


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute("DROP FUNCTION IF EXISTS outcomes_append_jobs(jsonb)")

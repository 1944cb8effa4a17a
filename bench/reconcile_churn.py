"""Churn for bench.reconcile: what the jobs closed since autovacuum last ran on the jobs table
leave there (dead row versions, and their entries in ix_jobs_open) until a VACUUM removes them."""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Any

import psycopg

from bench._common import libpq_url
from bench.reconcile_checks import SAMPLE_STREAMS, Check, check_streams, stream_events
from bench.reconcile_history import CHUNK, JOB_COLUMNS, JobRow, copy_rows, job_row, jobs_projection
from bench.reconcile_ledgers import FilledLedger
from ledger.job_fold import evolve
from ledger.job_view import JobView

DEAD_PER_JOB = 2  # a job's row is inserted queued, then updated running, then updated closed


def churn_size(conn: psycopg.Connection[Any], filled: FilledLedger) -> int:
    """Closed jobs whose dead row versions make autovacuum's default trigger fire on `jobs`."""
    threshold = int(str(conn.execute("SHOW autovacuum_vacuum_threshold").fetchall()[0][0]))
    scale = float(str(conn.execute("SHOW autovacuum_vacuum_scale_factor").fetchall()[0][0]))
    dead = threshold + scale * filled.check.jobs
    return min(filled.plan.closed_jobs, int(dead) // DEAD_PER_JOB)


def stage_rows(filled: FilledLedger, job_ids: Sequence[str]) -> list[list[JobRow]]:
    """Each job's read-model row after each of its events, as the projection wrote them."""
    projection = jobs_projection(filled.store)
    stages: list[list[JobRow]] = [[], [], []]
    for start in range(0, len(job_ids), CHUNK):
        views: dict[str, JobView] = {}
        for recorded in stream_events(filled.store, job_ids[start : start + CHUNK]):
            view = evolve(views.get(recorded.stream_id), recorded)
            views[recorded.stream_id] = view
            stages[recorded.stream_version - 1].append(job_row(projection, view))
    return stages


def churn(filled: FilledLedger) -> int:
    """Leave in `jobs` what the jobs closed since the last autovacuum leave there: their dead row
    versions, and their entries in the indexes (ix_jobs_open: one queued, one running per job).

    The most recently closed jobs' rows are rewritten through the row versions the projection
    wrote when they ran (queued, running, closed; each stage one UPDATE per row, in its own
    transaction), ending where they were. As many jobs as make autovacuum's default trigger
    (threshold + scale factor x rows) fire: the worst moment of the steady state. Autovacuum is
    turned off on this scratch `jobs` table so that it cannot clean up in the middle of the
    measurement. The events are untouched; the rows end identical (checked on a sample)."""
    with psycopg.connect(libpq_url(filled.url), autocommit=True) as conn:
        count = churn_size(conn, filled)
        conn.execute("ALTER TABLE jobs SET (autovacuum_enabled = false)")
        job_ids = [
            str(r[0])
            for r in conn.execute(
                "SELECT job_id FROM jobs WHERE status = 'succeeded'"
                " ORDER BY ledger_position DESC LIMIT %s",
                (count,),
            )
        ]
    stages = stage_rows(filled, job_ids)
    if any(len(stage) != len(job_ids) for stage in stages):
        raise RuntimeError(f"{filled.name}: churned jobs without three events")
    columns = [c for c in JOB_COLUMNS if c != "job_id"]
    assign = ", ".join(columns)
    update = (
        f"UPDATE jobs SET ({assign}) = ({', '.join('s.' + c for c in columns)})"
        " FROM bench_stage s WHERE jobs.job_id = s.job_id"
    )
    with psycopg.connect(libpq_url(filled.url)) as conn:
        conn.execute("CREATE TEMP TABLE bench_stage (LIKE jobs)")
        for stage in stages:
            copy_rows(conn, "bench_stage", JOB_COLUMNS, stage)
            updated = conn.execute(update).rowcount
            conn.execute("TRUNCATE bench_stage")
            conn.commit()
            if updated != len(job_ids):
                raise RuntimeError(f"{filled.name}: churn updated {updated} of {len(job_ids)}")
    # Checked by primary key only: a plain index scan of ix_jobs_open (a count of the open jobs,
    # say) would mark the dead entries it meets as dead, and undo what this set up.
    check = Check()
    check_streams(filled.store, random.sample(job_ids, min(SAMPLE_STREAMS, len(job_ids))), check)
    if check.problems:
        raise RuntimeError(f"ledger {filled.name} after churn: {'; '.join(check.problems)}")
    filled.churned = len(job_ids)
    return len(job_ids)

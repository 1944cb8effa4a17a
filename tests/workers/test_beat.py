"""The reconciler on Celery beat: the schedule names a registered task, and the task runs a
real reconcile pass against the configured ledger."""

from __future__ import annotations

import time
from datetime import UTC, datetime

import pytest

from ledger.decisions import Caller, JobRequest
from ledger.runtime.ledger import Ledger
from ledger.services.submit import submit
from tests.factories import get_job, open_sql
from tests.tools import RECONCILE_SPENDS
from workers.app import RECONCILE_TASK, make_celery


def test_beat_schedules_the_reconciler(tmp_path: object, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(str(tmp_path))
    app = make_celery()
    entry = app.conf.beat_schedule["reconcile"]
    assert entry["task"] == RECONCILE_TASK
    assert RECONCILE_TASK in app.tasks


def test_the_beat_task_runs_a_pass(
    database_url: str, tmp_path: object, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(str(tmp_path))
    monkeypatch.setenv("OUTCOMES_DATABASE_URL", database_url)
    store = open_sql(database_url)
    try:
        request = JobRequest(RECONCILE_SPENDS, {}, start_within_s=1)
        job = submit(Ledger(store), Caller("acme", "tok"), request).view
        assert job.start_by is not None
        while datetime.now(UTC) <= job.start_by:  # wait until its start deadline has passed
            time.sleep(0.02)
        app = make_celery()
        recorded = app.tasks[RECONCILE_TASK].apply().get()
        assert recorded == [f"job.outcome_missing {job.job_id}"]
        view = get_job(store, job.job_id)
        assert view is not None and view.error is not None
        assert view.error.cause == "never_started"
    finally:
        store.close()

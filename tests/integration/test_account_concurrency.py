"""Per-account concurrency at claim, across the fleet (docs/fairness.md): two real worker
processes with three slots each, and an account allowed two jobs running at once. From the
events' own timestamps (each job's `work.started` to its outcome), never more than two of the
account's jobs run at once; every job runs exactly once and succeeds (a deferred job is
started later, never lost, never told as failed)."""

from __future__ import annotations

from datetime import datetime

import pytest

from ledger.codes import Status
from ledger.decisions import Caller
from ledger.events import RecordedEvent, job_stream
from tests.plugins.deployments import Deployment, deployments, wait_terminal

LIMIT = 2
JOBS = 10
OTHER = Caller(account="globex", token_id="tok-globex")


def most_at_once(intervals: list[tuple[datetime, datetime]]) -> int:
    """The most intervals open at one moment (one that ends as another starts: not both)."""
    edges = sorted([(start, 1) for start, _ in intervals] + [(end, -1) for _, end in intervals])
    running = most = 0
    for _, step in edges:
        running += step
        most = max(most, running)
    return most


def run_interval(history: list[RecordedEvent]) -> tuple[datetime, datetime]:
    started = [e.recorded_at for e in history if e.type == "work.started"]
    ended = [e.recorded_at for e in history if e.type == "work.succeeded"]
    assert len(started) == 1 and len(ended) == 1, [e.type for e in history]
    return started[0], ended[0]


@pytest.mark.parametrize("deployment", deployments("rabbitmq/postgres"), indirect=True)
def test_an_accounts_running_jobs_never_exceed_its_limit_across_workers(
    deployment: Deployment,
) -> None:
    deployment.env["OUTCOMES_ACCOUNT_CONCURRENCY"] = str(LIMIT)
    deployment.start_workers(count=2, concurrency=3)
    acme = [deployment.submit("rtest.slow_probe", {"seconds": 0.3}).job_id for _ in range(JOBS)]
    globex = [deployment.submit("rtest.slow_probe", {"seconds": 0.3}, OTHER).job_id]

    views = wait_terminal(deployment.store, acme + globex, timeout_s=90)
    assert {v.status for v in views.values()} == {Status.SUCCEEDED}
    assert all(v.attempts == 1 for v in views.values())
    assert sorted(deployment.side_effect_jobs()) == sorted(acme + globex)  # each ran once

    intervals = [run_interval(deployment.store.read_stream(job_stream(j))) for j in acme]
    # Six slots, ten jobs: unlimited, more than two would run at once.
    assert most_at_once(intervals) == LIMIT

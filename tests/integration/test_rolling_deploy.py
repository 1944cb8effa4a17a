"""A rolling deploy, with real worker processes: the API accepted a job under this release's
tool, and a worker of the next release, whose tool needs a field this release never sent,
takes it. The worker must record a failure (INPUT_INVALID, naming the field), run nothing, and
never leave the job running for the reconciler to misreport as a lost worker."""

from __future__ import annotations

import pytest

from ledger.codes import Code, Status
from tests.plugins.deployments import Deployment, deployments, wait_terminal
from tests.tools import NEXT_RELEASE_ENV, SHIP


@pytest.mark.parametrize(
    "deployment", deployments("rabbitmq/postgres", "embedded/sqlite"), indirect=True
)
def test_a_worker_of_the_next_release_fails_the_job_and_runs_nothing(
    deployment: Deployment,
) -> None:
    deployment.env[NEXT_RELEASE_ENV] = "1"  # the workers run the next release of the tool
    deployment.start_workers(count=1, concurrency=1)
    job = deployment.submit(SHIP, {"order": "o-1"})  # valid for this (the API's) release
    assert job.accepted

    view = wait_terminal(deployment.store, [job.job_id])[job.job_id]

    assert view.error is not None
    assert (view.status, view.code, view.recorded_by, view.attempts) == (
        Status.FAILED,
        Code.INPUT_INVALID,
        "worker",
        1,
    )
    assert "warehouse" in view.error.message and "o-1" not in view.error.message
    assert view.next_action == "stop_and_report"  # nothing ran: nothing to verify at the source
    assert deployment.side_effect_jobs() == []  # the tool body never ran

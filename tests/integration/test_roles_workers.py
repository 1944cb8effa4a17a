"""Workers connect as the application role (the `deployment` fixture's default on Postgres) and
run jobs quietly; a worker connected as a superuser runs them too but says, once, that it
should not be."""

from __future__ import annotations

import pytest

from ledger.job_view import Status
from tests.plugins.deployments import Deployment, deployments, wait_terminal, wait_until

WARNING = "connected to the ledger as"


@pytest.mark.parametrize("deployment", deployments("rabbitmq/postgres"), indirect=True)
def test_workers_warn_once_as_superuser_and_not_as_the_application_role(
    deployment: Deployment,
) -> None:
    assert deployment.env["OUTCOMES_DATABASE_URL"] == deployment.app_database_url
    [quiet] = deployment.start_workers(count=1)
    deployment.env["OUTCOMES_DATABASE_URL"] = deployment.database_url  # the owner, a superuser
    [loud] = deployment.start_workers(count=1)
    wait_until(lambda: WARNING in loud.log(), 30, "the superuser's worker to warn")
    jobs = [deployment.submit("tracker.read_issue", {"issue_ref": "T-1"}) for _ in range(4)]
    views = wait_terminal(deployment.store, [job.job_id for job in jobs])
    assert {view.status for view in views.values()} == {Status.SUCCEEDED}
    assert loud.log().count(WARNING) == 1
    assert "a superuser" in loud.log()
    assert WARNING not in quiet.log()

"""People in the loop end to end (docs/approvals.md), in both modes: embedded (SQLite and the
filesystem broker) and production (Postgres and RabbitMQ), with real `outcomes worker`
processes. A parked call runs once approved, never when denied or expired; a call approved
after a brake pull is halted by the worker (BRAKE_ENGAGED) and its tool never runs; and the
ledger with its decision events verifies (`outcomes audit verify`)."""

from __future__ import annotations

import orjson
import pytest
from click.testing import CliRunner

from cli.main import cli
from ledger.codes import Code, Status
from ledger.decisions import JobRequest
from ledger.errors import NotDecidableError, SelfApprovalError
from ledger.runtime.ledger import Ledger
from ledger.services import brakes
from ledger.services.approvals import Approver, decide
from ledger.services.preflight import preflight
from ledger.services.reconcile import reconcile_once
from tests.plugins.deployments import (
    AGENT,
    Deployment,
    deployments,
    load_views,
    stream_types,
    wait_terminal,
)
from tests.services.test_reconcile import POLICY, later
from tests.store_helpers import settled_head
from tests.tools import APPROVED_CHARGE, APPROVED_METERED

BOTH = deployments("embedded/sqlite", "rabbitmq/postgres")
APPROVER = Approver("acme", "approver", "tok-approver")


@pytest.mark.parametrize("deployment", BOTH, indirect=True)
def test_approve_deny_expire_and_a_brake_pulled_while_parked(deployment: Deployment) -> None:
    store, ledger = deployment.store, Ledger(deployment.store)
    deployment.start_workers(count=1)
    approved, denied, expired, braked = (
        deployment.submit(APPROVED_CHARGE, {"amount": i}) for i in (1, 2, 3, 4)
    )
    for view in (approved, denied, expired, braked):
        assert view.status is Status.AWAITING_APPROVAL

    # Approved: queued, dispatched, run once by the worker.
    decide(ledger, approved.job_id, APPROVER, "approved", "checked", deployment.dispatcher)
    wait_terminal(store, [approved.job_id], timeout_s=60)
    # Denied: refused at once, nothing dispatched.
    decide(ledger, denied.job_id, APPROVER, "denied", "wrong customer")
    # A brake pulled while it waits; approved afterwards: the worker halts it at its claim.
    brake = brakes.pull(ledger, f"tool:{APPROVED_CHARGE}", "incident", "olga")
    decide(ledger, braked.job_id, APPROVER, "approved", "approved late", deployment.dispatcher)
    wait_terminal(store, [braked.job_id], timeout_s=60)
    # Nobody decides the last one: past its expiry the reconciler closes it.
    passed = reconcile_once(ledger, None, POLICY, at=later(4000))
    assert passed.recorded == [f"work.halted {expired.job_id}"]

    ids = [v.job_id for v in (approved, denied, expired, braked)]
    done = wait_terminal(store, ids, timeout_s=60)
    assert done[approved.job_id].status is Status.SUCCEEDED
    for job_id, code, cause, by in (
        (denied.job_id, Code.ACCESS_DENIED, "approval_denied", "api"),
        (expired.job_id, Code.DEADLINE_EXCEEDED, "approval_expired", "reconciler"),
        (braked.job_id, Code.BRAKE_ENGAGED, brake.brake_id, "worker"),
    ):
        view = done[job_id]
        assert view.status is Status.REFUSED and view.error is not None, view
        assert (view.error.code, view.error.cause, view.recorded_by) == (code, cause, by)
        assert "work.started" not in stream_types(store, job_id)
    assert stream_types(store, approved.job_id) == [
        "job.accepted",
        "job.approval_decided",
        "work.started",
        "work.succeeded",
    ]
    assert stream_types(store, braked.job_id) == [
        "job.accepted",
        "job.approval_decided",
        "work.halted",
    ]
    assert deployment.side_effect_jobs() == [approved.job_id]  # the tool ran once, for it
    assert load_views(store, ids)[approved.job_id].attempts == 1

    deployment.stop_workers()
    store.sequence()  # Postgres: every event in ledger order before the audit reads it
    result = CliRunner().invoke(cli, ["audit", "verify", "--json"], catch_exceptions=False)
    found = orjson.loads(result.stdout)
    assert result.exit_code == 0, result.output
    assert found["problems"] == []


@pytest.mark.parametrize("deployment", BOTH, indirect=True)
def test_refused_never_parked_who_decides_and_a_dry_run(deployment: Deployment) -> None:
    """Over quota: refused, never parked; the submitting token and a second decision are
    refused and change nothing; a dry run records nothing and counts no quota."""
    store, ledger = deployment.store, Ledger(deployment.store)
    before = settled_head(store)
    dry = preflight(ledger, AGENT, JobRequest(APPROVED_METERED, {"amount": 1}))
    assert (dry.would, dry.error) == ("awaiting_approval", None)
    assert settled_head(store) == before  # nothing recorded

    parked = deployment.submit(APPROVED_METERED, {"amount": 1})
    assert parked.status is Status.AWAITING_APPROVAL  # counted in the quota of one
    over = deployment.submit(APPROVED_METERED, {"amount": 2})
    assert over.status is Status.REFUSED and over.approval is None
    assert over.error is not None and over.error.code is Code.QUOTA_EXCEEDED
    assert stream_types(store, over.job_id) == ["job.refused"]
    dry = preflight(ledger, AGENT, JobRequest(APPROVED_METERED, {"amount": 3}))
    assert dry.would == "refused" and dry.error is not None
    assert dry.error.code is Code.QUOTA_EXCEEDED

    submitter = Approver("acme", "operator", AGENT.token_id)  # the token that submitted it
    with pytest.raises(SelfApprovalError):
        decide(ledger, parked.job_id, submitter, "approved", "me")
    decide(ledger, parked.job_id, APPROVER, "denied", "not this month")
    with pytest.raises(NotDecidableError) as again:
        decide(ledger, parked.job_id, APPROVER, "approved", "changed my mind")
    assert again.value.envelope["approval"]["decision"] == "denied"
    assert stream_types(store, parked.job_id) == [
        "job.accepted",
        "job.approval_decided",
        "work.halted",
    ]

"""A halting turn end to end (docs/turns.md), in both modes with a real `outcomes worker`: the
turn's spending call fails; the reconciler's pass pulls the turn's brake, so its call still
waiting is halted by the worker at the claim (its tool never runs); its next call is refused
BRAKE_ENGAGED at submit; the report never reads all_succeeded and names what happened."""

from __future__ import annotations

import pytest

from ledger.codes import Code, Status
from ledger.decisions import JobRequest
from ledger.reconcile_rules import ReconcilePolicy
from ledger.runtime.ledger import Ledger
from ledger.services import turns
from ledger.services.reconcile import reconcile_once
from ledger.services.submit import submit
from tests.plugins.deployments import AGENT, Deployment, deployments, wait_terminal
from tests.tools import FAILING_CHARGE

BOTH = deployments("embedded/sqlite", "rabbitmq/postgres")
CHARGE = "itest.charge"


@pytest.mark.parametrize("deployment", BOTH, indirect=True)
def test_a_halting_turn_holds_its_waiting_call_and_refuses_the_next(
    deployment: Deployment,
) -> None:
    store, ledger = deployment.store, Ledger(deployment.store)

    def ask(tool: str, amount: int, dispatch: bool = True) -> str:
        request = JobRequest(tool, {"amount": amount}, turn="t-9", halt_on_failure=True)
        sender = deployment.dispatcher if dispatch else None
        return submit(ledger, AGENT, request, sender).view.job_id

    paid = ask(CHARGE, 1)
    failing = ask(FAILING_CHARGE, 2)
    waiting = ask(CHARGE, 3, dispatch=False)  # decided; its message not yet published
    deployment.start_workers(count=1)
    done = wait_terminal(store, [paid, failing], timeout_s=60)
    assert done[paid].status is Status.SUCCEEDED
    assert done[failing].status is Status.FAILED

    # The reconciler halts the turn, then relays the waiting call: the worker halts it.
    passed = reconcile_once(ledger, deployment.dispatcher, ReconcilePolicy(relay_after_s=0))
    assert len(passed.turns_halted) == 1
    held = wait_terminal(store, [waiting], timeout_s=60)[waiting]
    assert held.status is Status.REFUSED and held.error is not None
    assert (held.error.code, held.error.cause) == (Code.BRAKE_ENGAGED, passed.turns_halted[0])
    assert held.recorded_by == "worker"

    refused = submit(ledger, AGENT, JobRequest(CHARGE, {"amount": 4}, turn="t-9")).view
    assert refused.status is Status.REFUSED and refused.error is not None
    assert (refused.error.code, refused.error.cause) == (
        Code.BRAKE_ENGAGED,
        passed.turns_halted[0],
    )

    told = turns.report(ledger, "acme", "t-9")
    assert (told.complete, told.all_succeeded) == (True, False)
    assert told.already_happened == [paid]
    assert told.first_failure is not None and told.first_failure.job_id == failing
    assert told.halt is not None and told.halt.active
    assert deployment.side_effect_jobs() == [paid]  # the held and refused calls never ran

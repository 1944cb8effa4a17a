"""The reconciler as a Celery beat task, for deployments that run beat rather than the
`outcomes reconcile` service: `celery -A workers.main beat` plus the usual workers.

Passes are idempotent (each finding is recorded once), so overlapping runs are harmless."""

from __future__ import annotations

import logging

from celery import shared_task

from ledger.services.reconcile import ReconcileRunner, policy_from
from workers import resources
from workers.app import RECONCILE_TASK

log = logging.getLogger(__name__)


@shared_task(name=RECONCILE_TASK, ignore_result=True)
def reconcile_pass() -> list[str]:
    runner = ReconcileRunner(
        resources.ledger(), resources.dispatcher(), policy_from(resources.settings())
    )
    result = runner.run_once()
    if result.recorded:
        log.info("reconcile: %s", "; ".join(result.recorded))
    return result.recorded

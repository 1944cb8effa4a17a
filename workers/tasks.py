"""The one task: execute a job by id. Everything it decides is recorded in the ledger."""

from __future__ import annotations

import logging

from celery import Task, shared_task

from ledger.errors import OutcomeUnrecordedError, StorageUnavailableError
from ledger.services.execute import Execution
from workers import resources
from workers.app import EXECUTE_TASK

log = logging.getLogger(__name__)


# On a threads pool, messages are claimed and run in batches (workers/batched.py); a
# prefork or solo pool, or a delayed message, runs this task one message at a time.
@shared_task(
    name=EXECUTE_TASK,
    bind=True,
    acks_late=True,
    max_retries=8,
    Strategy="workers.batched:strategy",
)
def execute(self: Task, job_id: str) -> None:
    try:
        result: Execution = resources.executor().execute(job_id)
    except OutcomeUnrecordedError as exc:
        # The tool ran; running it again is not ours to decide. The lease lapses and the
        # reconciler records what is known (worker_lost, verify_at_source if it spends).
        log.error("%s", exc)
        return
    except StorageUnavailableError as exc:
        # Fail closed: the brake could not be read, so nothing started. Try again later; if
        # the broker loses this, the reconciler re-dispatches the job.
        log.warning("job %s: ledger unavailable (%s); retrying", job_id, exc)
        raise self.retry(countdown=min(2**self.request.retries, 30)) from exc
    log.info("job %s: %s %s", job_id, result.claim.value, result.event_type or "")

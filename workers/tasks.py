"""The one task: execute a job by id. Everything it decides is recorded in the ledger."""

from __future__ import annotations

import logging
import time

from celery import Task, shared_task
from celery.exceptions import Reject

from ledger.errors import OutcomeUnrecordedError, StorageUnavailableError
from ledger.services.execute import Execution
from workers import resources
from workers.app import EXECUTE_TASK
from workers.task_events import UNRECORDED, settled_text

log = logging.getLogger(__name__)
# How long a pool process keeps trying to claim while the ledger is unavailable before it
# hands the message back to the broker (never dropped: its job's confirmed message is it).
CLAIM_PATIENCE_S = 30.0


# On a threads pool, messages are claimed and run in batches (workers/batched.py); a
# prefork or solo pool, or a delayed message, runs this task one message at a time. It
# returns what the delivery came to in the ledger's words, from which Celery's request sends
# the task event closest to it (workers/task_events.py: a crash is FAILURE, never SUCCESS).
@shared_task(
    name=EXECUTE_TASK,
    bind=True,
    acks_late=True,
    Strategy="workers.batched:strategy",
    Request="workers.task_events:ExecuteRequest",
)
def execute(self: Task, job_id: str) -> str:
    deadline = time.monotonic() + CLAIM_PATIENCE_S
    delay = 0.5
    while True:
        try:
            result: Execution = resources.executor().execute(job_id)
        except OutcomeUnrecordedError as exc:
            # The tool ran; running it again is not ours to decide. The lease lapses and the
            # reconciler records what is known (worker_lost, verify_at_source if it spends).
            log.error("%s", exc)
            return UNRECORDED
        except StorageUnavailableError as exc:
            # Fail closed: the brake could not be read, so nothing started. The message is
            # kept: tried again here for a while, then handed back to the broker (a new
            # message, as Celery's retry would publish, could be lost without a trace).
            if time.monotonic() + delay > deadline:
                log.warning("job %s: ledger unavailable (%s); message handed back", job_id, exc)
                raise Reject(exc, requeue=True) from exc
            log.warning("job %s: ledger unavailable (%s); retrying", job_id, exc)
            time.sleep(delay)
            delay = min(delay * 2, 8.0)
            continue
        log.info("job %s: %s %s", job_id, result.claim.value, result.event_type or "")
        return settled_text(result)

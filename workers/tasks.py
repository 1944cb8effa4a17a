"""The one task: execute a job by id. Everything it decides is recorded in the ledger."""

from __future__ import annotations

import logging
import os
import socket
from functools import cache

from celery import Task, shared_task

from ledger.errors import StorageUnavailableError
from ledger.execution import Execution, Executor, OutcomeUnrecordedError
from ledger.persistence.open import open_store
from ledger.settings import load_settings
from workers.app import EXECUTE_TASK
from workers.dispatch import CeleryDispatcher

log = logging.getLogger(__name__)


@cache
def _executor(pid: int, url: str, lease_s: float) -> Executor:
    """One store (and connection pool) per worker process, made after the fork."""
    store = open_store(url, pool_size=2)
    return Executor(store, f"{socket.gethostname()}:{pid}", lease_s=lease_s)


@shared_task(name=EXECUTE_TASK, bind=True, acks_late=True, max_retries=8)
def execute(self: Task, job_id: str) -> None:
    settings = load_settings()
    try:
        executor = _executor(os.getpid(), settings.database_url, settings.lease_s)
        result: Execution = executor.execute(job_id)
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
    if result.retry_in_s is not None:
        CeleryDispatcher(self.app, settings.queue).dispatch(job_id, result.retry_in_s)

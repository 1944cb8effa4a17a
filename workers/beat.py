"""The reconciler as a Celery beat task, for deployments that run beat rather than the
`outcomes reconcile` service: `celery -A workers.main beat` plus the usual workers.

Passes are idempotent (each finding is recorded once), so overlapping runs are harmless."""

from __future__ import annotations

import logging
import os
from functools import cache

from celery import shared_task

from ledger.persistence.open import open_store
from ledger.persistence.reconcile import reconcile_once
from ledger.persistence.store import EventStore
from ledger.reconcile_rules import ReconcilePolicy
from ledger.settings import load_settings
from workers.app import RECONCILE_TASK
from workers.dispatch import CeleryDispatcher, dispatcher_from_settings

log = logging.getLogger(__name__)


@cache
def _store(pid: int, url: str) -> EventStore:
    """One store per process (made after the fork) and ledger."""
    return open_store(url, pool_size=1)


@cache
def _dispatcher(pid: int) -> CeleryDispatcher:
    """Built once per process, not once per pass (a Celery app and its producer pool)."""
    return dispatcher_from_settings()


@shared_task(name=RECONCILE_TASK, ignore_result=True)
def reconcile_pass() -> list[str]:
    settings = load_settings()
    result = reconcile_once(
        _store(os.getpid(), settings.database_url),
        _dispatcher(os.getpid()),
        ReconcilePolicy(settings.dispatch_timeout_s),
    )
    if result.recorded:
        log.info("reconcile: %s", "; ".join(result.recorded))
    return result.recorded

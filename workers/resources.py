"""What a worker process holds for its lifetime, made once per process (after the fork):
its ledger (one connection pool), its dispatcher (its kept producers), its outbox and its
executor.

Keyed by pid, so a prefork child never reuses its parent's pool."""

from __future__ import annotations

import os
import socket
from functools import cache
from typing import Any

from celery.signals import worker_shutdown

from ledger.runtime.ledger import Ledger, open_ledger
from ledger.runtime.outbox import Outbox
from ledger.services.execute import Executor
from ledger.settings import Settings, load_settings
from workers.dispatch import CeleryDispatcher, dispatcher_from_settings


@cache
def settings() -> Settings:
    """The worker process's settings, read once (a prefork child inherits its parent's: the
    same environment). Everything a worker does reads them here."""
    return load_settings()


def ledger() -> Ledger:
    return _ledger(os.getpid(), settings().database_url)


def dispatcher() -> CeleryDispatcher:
    return _dispatcher(os.getpid())


def executor() -> Executor:
    return _executor(os.getpid(), settings().lease_s)


@cache
def _ledger(pid: int, url: str) -> Ledger:
    return open_ledger(url, pool_size=2)


@cache
def _dispatcher(pid: int) -> CeleryDispatcher:
    return dispatcher_from_settings(settings())


def outbox() -> Outbox:
    return _outbox(os.getpid())


@cache
def _outbox(pid: int) -> Outbox:
    # Retries go out in the background: the thread that records an outcome never waits for
    # the broker's confirmation.
    made = Outbox(ledger(), dispatcher())
    _OUTBOXES.append(made)
    return made


_OUTBOXES: list[Outbox] = []


@worker_shutdown.connect
def close_outboxes(**_: Any) -> None:
    """At a warm shutdown the retries still being published go out, and what the broker
    confirmed is recorded (what cannot go out is the reconciler's relay's)."""
    for made in _OUTBOXES:
        made.close()


@cache
def _executor(pid: int, lease_s: float) -> Executor:
    worker_id = f"{socket.gethostname()}:{pid}"
    return Executor(ledger(), worker_id, outbox(), lease_s=lease_s)

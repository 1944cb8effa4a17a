"""What a worker process holds for its lifetime, made once per process (after the fork):
its ledger (one connection pool), its dispatcher (its kept producers) and its executor.

Keyed by pid, so a prefork child never reuses its parent's pool."""

from __future__ import annotations

import os
import socket
from functools import cache

from ledger.services.execute import Executor
from ledger.services.ledger import Ledger, open_ledger
from ledger.settings import load_settings
from workers.dispatch import CeleryDispatcher, dispatcher_from_settings


def ledger() -> Ledger:
    return _ledger(os.getpid(), load_settings().database_url)


def dispatcher() -> CeleryDispatcher:
    return _dispatcher(os.getpid())


def executor() -> Executor:
    return _executor(os.getpid(), load_settings().lease_s)


@cache
def _ledger(pid: int, url: str) -> Ledger:
    return open_ledger(url, pool_size=2)


@cache
def _dispatcher(pid: int) -> CeleryDispatcher:
    return dispatcher_from_settings()


@cache
def _executor(pid: int, lease_s: float) -> Executor:
    worker_id = f"{socket.gethostname()}:{pid}"
    return Executor(ledger(), worker_id, dispatcher(), lease_s=lease_s)

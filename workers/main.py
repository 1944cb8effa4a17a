"""Entry point for a worker process (`outcomes worker` and the compose file call it)."""

from __future__ import annotations

import logging
import os
from typing import Any

from celery import Celery
from celery.signals import worker_ready

from ledger.heap import freeze_startup_heap
from ledger.runtime.ledger import open_ledger
from ledger.services import admin
from workers import observability, resources
from workers.app import make_celery
from workers.batched import BatchedStop
from workers.shutdown import PromptShutdown

log = logging.getLogger(__name__)

app: Celery = make_celery(resources.settings())
app.steps["worker"].add(PromptShutdown)
app.steps["consumer"].add(BatchedStop)


@worker_ready.connect
def warn_if_privileged(**_: Any) -> None:
    """Once per worker, in its main process: a ledger of its own, closed at once, so that no
    connection is left for a prefork child to inherit. Then start-up's heap is frozen."""
    with open_ledger(resources.settings().database_url, pool_size=1) as ledger:
        warning = admin.privilege_warning(ledger)
    if warning:
        log.warning("%s", warning)
    freeze_startup_heap()


def run_worker(concurrency: int | None, pool: str, loglevel: str) -> None:
    observability.check(pool)
    settings = resources.settings()
    argv = ["worker", f"--loglevel={loglevel}", "-Q", settings.queue, f"--pool={pool}"]
    # A unique node name: several workers may run on one host.
    argv.append(f"--hostname=outcomes-{os.getpid()}@%h")
    if concurrency:
        argv.append(f"--concurrency={concurrency}")
    # No gossip or mingle: workers need nothing from each other (the ledger coordinates them),
    # and mingle would hold every start for a round of replies.
    argv += ["--without-gossip", "--without-mingle"]
    if not settings.task_events:
        # Event heartbeats (worker-online, worker-heartbeat every 2 s, worker-offline) are what
        # Flower and `celery events` count a worker online by; nobody reads them while task
        # events are off, so then none is sent: the broker carries no event at all, as before.
        argv.append("--without-heartbeat")
    code = app.start(argv=argv)  # worker_main() would drop a failed worker's exit code
    if code:
        raise SystemExit(code)

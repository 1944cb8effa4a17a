"""Entry point for a worker process (`outcomes worker` and the compose file call it)."""

from __future__ import annotations

import os

from celery import Celery

from ledger.settings import load_settings
from workers.app import make_celery

app: Celery = make_celery()


def run_worker(concurrency: int | None, pool: str, loglevel: str) -> None:
    argv = ["worker", f"--loglevel={loglevel}", "-Q", load_settings().queue, f"--pool={pool}"]
    # A unique node name: several workers may run on one host.
    argv.append(f"--hostname=outcomes-{os.getpid()}@%h")
    if concurrency:
        argv.append(f"--concurrency={concurrency}")
    argv += ["--without-heartbeat", "--without-gossip", "--without-mingle"]
    code = app.start(argv=argv)  # worker_main() would drop a failed worker's exit code
    if code:
        raise SystemExit(code)

"""`outcomes serve`: the API; on embedded defaults also a worker and the reconciler."""

from __future__ import annotations

import threading

import click

from cli.errors import reports_errors
from cli.processes import exit_on_sigterm, start_worker, stop
from ledger.persistence import migrate as migrations
from ledger.persistence.open import open_store
from ledger.persistence.reconcile import reconcile_once
from ledger.persistence.store import EventStore
from ledger.persistence.submit import Dispatcher
from ledger.reconcile_rules import ReconcilePolicy
from ledger.settings import load_settings


@click.command()
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
@click.option("--port", type=click.IntRange(0, 65535), default=8000, show_default=True)
@click.option(
    "--api-only",
    is_flag=True,
    help="Never start the embedded worker and reconciler (production runs them separately).",
)
@reports_errors
def serve(host: str, port: int, api_only: bool) -> None:
    """Serve the HTTP API.

    On embedded defaults (SQLite ledger, no OUTCOMES_BROKER_URL) one command runs everything:
    the schema is migrated, and a worker process and the reconciler run beside the API. With
    production URLs it runs the API alone; start `outcomes worker` and `outcomes reconcile`.
    """
    from api.server import serve as run_api  # the CLI starts the API by its entry point
    from workers.dispatch import dispatcher_from_settings

    settings = load_settings()
    store = open_store(settings.database_url)
    dispatcher = dispatcher_from_settings()
    everything = settings.embedded and settings.broker_url is None and not api_only
    if not everything:
        run_api(store, dispatcher, host, port)
        return
    migrations.upgrade(store.engine)
    exit_on_sigterm()
    worker = start_worker()
    stop_reconciler = threading.Event()
    reconciler = threading.Thread(
        target=_reconcile_loop,
        args=(store, dispatcher, ReconcilePolicy(settings.dispatch_timeout_s), stop_reconciler),
        name="reconciler",
        daemon=True,
    )
    reconciler.start()
    click.echo(f"outcomes: embedded ledger {settings.database_url}, worker pid {worker.pid}")
    try:
        run_api(store, dispatcher, host, port)
    finally:
        stop_reconciler.set()
        stop(worker)


def _reconcile_loop(
    store: EventStore, dispatcher: Dispatcher, policy: ReconcilePolicy, halt: threading.Event
) -> None:
    while not halt.wait(5.0):
        try:
            reconcile_once(store, dispatcher, policy)
        except Exception as exc:
            click.echo(f"outcomes: reconcile pass failed: {type(exc).__name__}: {exc}", err=True)

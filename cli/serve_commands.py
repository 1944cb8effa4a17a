"""`outcomes serve`: the API; on embedded defaults also a worker and the reconciler."""

from __future__ import annotations

import os
from pathlib import Path

import click

from cli.context import ledger_of
from cli.errors import reports_errors
from cli.params import MAX_DISPATCHES_OPTION
from cli.processes import exit_on_sigterm, start_worker, stop
from ledger.services import admin
from ledger.services.reconcile import MAX_DISPATCHES, ReconcileRunner, policy_from
from ledger.settings import Settings, load_settings
from ledger.tools import load_tool_modules, tool_names


@click.command()
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
@click.option("--port", type=click.IntRange(0, 65535), default=8000, show_default=True)
@click.option(
    "--api-only",
    is_flag=True,
    help="Never start the embedded worker and reconciler (production runs them separately).",
)
@click.option(
    "--max-dispatches",
    type=MAX_DISPATCHES_OPTION,
    default=MAX_DISPATCHES,
    show_default=True,
    help="The embedded reconciler's dispatches before a never-started job is failed.",
)
@reports_errors
def serve(host: str, port: int, api_only: bool, max_dispatches: int) -> None:
    """Serve the HTTP API.

    On embedded defaults (SQLite ledger, no OUTCOMES_BROKER_URL) one command runs everything:
    the schema is migrated, and a worker process and the reconciler run beside the API. With
    production URLs it runs the API alone; start `outcomes worker` and `outcomes reconcile`.
    """
    from api.server import serve as run_api  # the CLI starts the API by its entry point
    from workers.dispatch import dispatcher_from_settings

    settings = load_settings()
    ledger = ledger_of(click.get_current_context(), settings.database_url)
    dispatcher = dispatcher_from_settings()
    everything = settings.embedded and settings.broker_url is None and not api_only
    for line in banner(settings, ledger.describe(), host, port):
        click.echo(f"outcomes: {line}")
    if not everything:
        run_api(ledger, dispatcher, host, port)
        return
    admin.migrate(ledger)
    exit_on_sigterm()
    worker = start_worker()
    reconciler = ReconcileRunner(ledger, dispatcher, policy_from(settings, max_dispatches))
    reconciler.start()
    click.echo(
        f"outcomes: serve pid {os.getpid()}, embedded worker pid {worker.pid}, reconciler on"
    )
    try:
        run_api(ledger, dispatcher, host, port)
    finally:
        reconciler.stop()
        stop(worker)


def banner(settings: Settings, ledger: str, host: str, port: int) -> list[str]:
    """The first lines a person sees: where to go, what is loaded, how to get in."""
    load_tool_modules(settings.tools)  # the API loads them too; here only to name them
    names = tool_names()
    url = f"http://{host}:{port}"
    return [
        f"serving {url} (interactive docs: {url}/docs)",
        f"ledger {_where(ledger)}",
        f"tools loaded ({len(names)}): {', '.join(names)} from {', '.join(settings.tools)}"
        if names
        else "no tools loaded: set OUTCOMES_TOOLS=module,… (e.g. examples.seed_tools)",
        "a token for agents: outcomes tokens create --account acme --role agent",
    ]


def _where(ledger: str) -> str:
    """A SQLite file's absolute path (the URL's is relative to the working folder)."""
    prefix = "sqlite:///"
    return str(Path(ledger.removeprefix(prefix)).resolve()) if ledger.startswith(prefix) else ledger

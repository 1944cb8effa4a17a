"""`outcomes serve`: the API; on embedded defaults also a worker and the reconciler, and a
record of what it serves in its home folder (`cli.home_records`) for the CLI of a second
terminal."""

from __future__ import annotations

import os
import socket
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import click

from cli.context import ledger_of
from cli.errors import reports_errors
from cli.home_records import (
    BeatingRunner,
    Heartbeat,
    ServeRecord,
    clear_serve,
    client_url,
    record_serve,
)
from cli.processes import exit_on_sigterm, start_worker, stop
from cli.webhook_sender import WebhookSender
from ledger.clock import format_time, now
from ledger.services import admin
from ledger.services.reconcile import INTERVAL_S, policy_from
from ledger.services.webhook_relay import WebhookRelay
from ledger.services.webhook_relay import policy_from as webhook_policy
from ledger.settings import Settings, load_settings
from ledger.tools import load_tool_modules, tool_names


@click.command()
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
@click.option(
    "--port",
    type=click.IntRange(0, 65535),
    default=8000,
    show_default=True,
    help="Port to listen on (0: a free one, chosen at start and printed).",
)
@click.option(
    "--api-only",
    is_flag=True,
    help="Never start the embedded worker and reconciler (production runs them separately).",
)
@reports_errors
def serve(host: str, port: int, api_only: bool) -> None:
    """Serve the HTTP API.

    On embedded defaults (SQLite ledger, no OUTCOMES_BROKER_URL) one command runs everything:
    the schema is migrated, and a worker process, the reconciler and the webhook relay run
    beside the API. With
    production URLs it runs the API alone; start `outcomes worker` and `outcomes reconcile`.

    On a SQLite ledger it records what it serves in ./.outcomes/serve.json (its URL, pid and
    tools modules; removed when it stops), so `outcomes status` and `outcomes tools list` run
    in the same folder find it without OUTCOMES_API_URL or OUTCOMES_TOOLS.
    """
    from api.server import serve as run_api  # the CLI starts the API by its entry point
    from workers.dispatch import dispatcher_from_settings

    settings = load_settings()
    ledger = ledger_of(click.get_current_context(), settings.database_url)
    dispatcher = dispatcher_from_settings(settings)
    everything = settings.embedded and settings.broker_url is None and not api_only
    port = port or _free_port(host)
    for line in banner(settings, ledger.describe(), host, port):
        click.echo(f"outcomes: {line}")
    if settings.embedded:
        exit_on_sigterm()  # so the record is removed at SIGTERM too
    if not everything:
        with _recorded(settings, host, port, None, reconciler=False):
            run_api(ledger, dispatcher, host, port, settings=settings)
        return
    admin.migrate(ledger)
    worker = start_worker()
    policy = policy_from(settings)
    heartbeat = Heartbeat("outcomes serve", INTERVAL_S)
    reconciler = BeatingRunner(ledger, dispatcher, policy, heartbeat)
    relay = WebhookRelay(ledger, WebhookSender(), webhook_policy(settings))
    heartbeat.start()
    reconciler.start()
    relay.start()  # webhook deliveries (docs/webhooks.md), beside the reconciler
    click.echo(
        f"outcomes: serve pid {os.getpid()}, embedded worker pid {worker.pid}, reconciler on"
    )
    try:
        with _recorded(settings, host, port, worker.pid, reconciler=True):
            run_api(ledger, dispatcher, host, port, settings=settings)
    finally:
        relay.stop()
        reconciler.stop()
        heartbeat.stop()
        stop(worker)


@contextmanager
def _recorded(
    settings: Settings, host: str, port: int, worker_pid: int | None, reconciler: bool
) -> Iterator[None]:
    """serve.json while the API serves (SQLite ledgers: the home folder is in use)."""
    if not settings.embedded:
        yield
        return
    record = ServeRecord(
        url=client_url(host, port),
        pid=os.getpid(),
        hostname=socket.gethostname(),
        tool_modules=settings.tools,
        tools=tuple(tool_names()),
        started_at=format_time(now()),
        worker_pid=worker_pid,
        reconciler=reconciler,
    )
    try:
        path = record_serve(record)
    except OSError as exc:  # the record helps a second terminal; serving matters more
        click.echo(f"outcomes: WARNING: what this serves is not recorded: {exc}", err=True)
        yield
        return
    click.echo(f"outcomes: recorded in {path} (for `outcomes status` and `outcomes tools list`)")
    try:
        yield
    finally:
        clear_serve(record.pid)


def _free_port(host: str) -> int:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family) as probe:
        probe.bind((host, 0))
        return int(probe.getsockname()[1])


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

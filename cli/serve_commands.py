"""`outcomes serve`: the API; on embedded defaults also a worker and the reconciler, and a
record of what it serves in its home folder (`cli.home_records`) for the CLI of a second
terminal."""

from __future__ import annotations

import errno
import os
import socket
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import click

from cli.context import ledger_of
from cli.errors import fail, reports_errors
from cli.home_records import (
    BeatingRunner,
    Heartbeat,
    ServeRecord,
    clear_serve,
    client_url,
    find_served,
    process_alive,
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

    The port is taken first: when it is in use, nothing starts and the command exits 1.
    """
    from api.server import serve as run_api  # the CLI starts the API by its entry point
    from workers.dispatch import dispatcher_from_settings

    listener = _listen_or_fail(host, port)  # before anything starts or is recorded
    click.get_current_context().call_on_close(listener.close)
    port = int(listener.getsockname()[1])  # port 0: the free one the system chose
    settings = load_settings()
    ledger = ledger_of(click.get_current_context(), settings.database_url)
    dispatcher = dispatcher_from_settings(settings)
    everything = settings.embedded and settings.broker_url is None and not api_only
    for line in banner(settings, ledger.describe(), host, port):
        click.echo(f"outcomes: {line}")
    if settings.embedded:
        exit_on_sigterm()  # so the record is removed at SIGTERM too
    if not everything:
        with _recorded(settings, host, port, None, reconciler=False):
            run_api(ledger, dispatcher, host, port, settings=settings, listener=listener)
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
            run_api(ledger, dispatcher, host, port, settings=settings, listener=listener)
    finally:
        relay.stop()
        reconciler.stop()
        heartbeat.stop()
        stop(worker)


@contextmanager
def _recorded(
    settings: Settings, host: str, port: int, worker_pid: int | None, reconciler: bool
) -> Iterator[None]:
    """serve.json while the API serves (SQLite ledgers: the home folder is in use). The record
    of another serve still running here (on another port) is put back as this one stops: a
    serve removes its own record only."""
    if not settings.embedded:
        yield
        return
    other = find_served().record
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
        if clear_serve(record.pid) and other is not None and other.pid != record.pid:
            still = find_served().record
            if still is None and process_alive(other.pid, other.hostname):
                record_serve(other)


LISTEN_BACKLOG = 2048  # uvicorn's default


def listen(host: str, port: int) -> socket.socket:
    """The API's listening socket, bound as uvicorn binds one (SO_REUSEADDR: a port left in
    TIME_WAIT is free, one another process listens on is not). OSError when it cannot be."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    listener = socket.socket(family, socket.SOCK_STREAM)
    try:
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind((host, port))
        listener.listen(LISTEN_BACKLOG)  # listening: no other socket may bind it now
    except BaseException:
        listener.close()
        raise
    return listener


def _listen_or_fail(host: str, port: int) -> socket.socket:
    try:
        return listen(host, port)
    except OSError as exc:
        where = client_url(host, port).removeprefix("http://")
        if exc.errno != errno.EADDRINUSE:
            fail(f"cannot serve on {where}: {exc.strerror or exc}; nothing was started")
        served = find_served().record
        who = (
            f"`outcomes serve` pid {served.pid} serves it from this folder"
            if served is not None and served.url == client_url(host, port)
            else "another process listens on it"
        )
        fail(
            f"cannot serve on {where}: the port is taken ({who}); nothing was started. "
            "Stop that one, or choose another port (--port N, or --port 0 for a free one)"
        )


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

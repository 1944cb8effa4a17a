"""`outcomes status`: one screen for the operator on call. Is the API up, which workers answer,
how deep is the queue, which jobs are open, which brakes hold, when did the reconciler last
record anything."""

from __future__ import annotations

import urllib.error
import urllib.request
from typing import Any

import click

from cli.context import with_ledger
from cli.errors import reports_errors
from cli.output import emit_json, json_option
from cli.params import FiniteFloatRange
from ledger.clock import format_time
from ledger.services.ledger import Ledger
from ledger.services.status import ledger_status

DEFAULT_API_URL = "http://127.0.0.1:8000"


@click.command()
@click.option(
    "--api-url",
    envvar="OUTCOMES_API_URL",
    show_envvar=True,
    default=DEFAULT_API_URL,
    show_default=True,
    help="Where the API answers (its /readyz is asked).",
)
@click.option(
    "--timeout",
    type=FiniteFloatRange(0.1, 30.0),
    default=1.0,
    show_default=True,
    help="Seconds to wait for the API and for the workers' answers to a ping.",
)
@json_option
@reports_errors
@with_ledger
def status(ledger: Ledger, api_url: str, timeout: float, as_json: bool) -> None:
    """One screen: API reachable, workers that answer a Celery ping through the broker, queue
    depth, open jobs by status, active brakes, and the reconciler's last recorded finding."""
    from workers.control import broker_status  # the broker's side, through Celery

    found = ledger_status(ledger)
    broker = broker_status(timeout)
    body: dict[str, Any] = {
        "api": _api(api_url, timeout),
        "broker": broker.to_json(),
        "open_jobs": found.open_jobs,
        "brakes": [
            {"brake_id": b.brake_id, "scope": b.scope, "reason": b.reason} for b in found.brakes
        ],
        "last_reconcile": format_time(found.last_reconcile) if found.last_reconcile else None,
        "ledger": {"database": ledger.describe(), "last_position": found.last_position},
    }
    if as_json:
        emit_json(body)
        return
    api = body["api"]
    click.echo(
        f"api:        {api['url']} {'ready' if api['ready'] else 'NOT READY'}"
        + (f" ({api['error']})" if api["error"] else "")
    )
    if broker.reachable:
        names = ", ".join(broker.workers) or "none answered"
        click.echo(f"workers:    {len(broker.workers)} ({names})")
        depth = "unknown" if broker.queue_depth is None else str(broker.queue_depth)
        click.echo(f"queue:      {broker.queue}: {depth} waiting")
    else:
        click.echo(f"broker:     NOT REACHABLE ({broker.error})")
    click.echo("open jobs:  " + ", ".join(f"{k} {v}" for k, v in found.open_jobs.items()))
    click.echo(f"brakes:     {len(found.brakes)} active")
    for b in found.brakes:
        click.echo(f"  {b.brake_id}  {b.scope}: {b.reason}")
    click.echo(f"reconciler: last finding {body['last_reconcile'] or 'never'}")
    click.echo(f"ledger:     {ledger.describe()} (position {found.last_position})")


def _api(url: str, timeout_s: float) -> dict[str, Any]:
    target = url.rstrip("/") + "/readyz"
    try:
        with urllib.request.urlopen(target, timeout=timeout_s) as response:
            return {"url": url, "ready": response.status == 200, "error": None}
    except urllib.error.HTTPError as error:
        return {"url": url, "ready": False, "error": f"HTTP {error.code}"}
    except (OSError, ValueError) as exc:  # refused, timed out, or a malformed URL
        return {"url": url, "ready": False, "error": f"{type(exc).__name__}: {exc}"}

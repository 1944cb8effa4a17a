"""`outcomes status`: one screen for the operator on call. Is the API up, which workers answer,
how deep is the queue, which jobs are open, which brakes hold, whether a reconciler runs and
when it last recorded anything. Exit 0 when the API is ready, 3 (`EXIT_NOT_READY`) when it is
not (everything else printed all the same), 1 when the ledger cannot be read."""

from __future__ import annotations

import urllib.error
import urllib.request
from typing import Any

import click
from click.core import ParameterSource

from cli.context import with_ledger
from cli.errors import reason, reports_errors
from cli.home_records import Liveness, Served, find_served, reconciler_liveness
from cli.output import emit_json, json_option
from cli.params import FiniteFloatRange
from ledger.clock import format_time, now
from ledger.queueing import DispatchSummary
from ledger.runtime.ledger import Ledger
from ledger.services.status import LedgerStatus, ledger_status
from ledger.settings import load_settings
from ledger.verification_record import SINCE, VerificationRecord

DEFAULT_API_URL = "http://127.0.0.1:8000"
EXIT_NOT_READY = 3  # the API did not answer ready (1 and 2 are errors and usage)


@click.command()
@click.option(
    "--api-url",
    envvar="OUTCOMES_API_URL",
    show_envvar=True,
    help="Where the API answers (its /readyz is asked). Default: the URL the `outcomes serve` "
    f"running in this folder recorded in .outcomes/serve.json, else {DEFAULT_API_URL}.",
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
def status(ledger: Ledger, api_url: str | None, timeout: float, as_json: bool) -> None:
    """One screen: API ready, workers that answer a Celery ping through the broker, queue
    depth, open jobs by status, active brakes, the outbox (waiting jobs whose message the
    broker has not confirmed, the longest wait, re-dispatches by their evidence), whether a
    reconciler runs (its heartbeat in .outcomes/, on embedded defaults) and its last recorded
    finding, and the last recorded `outcomes audit verify`.

    Exits 3 when the API is not ready (the rest is printed all the same), 1 when the ledger
    cannot be read."""
    from workers.control import broker_status  # the broker's side, through Celery

    served = find_served()
    url, source = _api_url(api_url, served)
    found = ledger_status(ledger)
    broker = broker_status(timeout)
    last_finding = format_time(found.last_reconcile) if found.last_reconcile else None
    liveness = reconciler_liveness(load_settings().embedded)
    body: dict[str, Any] = {
        "api": _api(url, timeout) | {"source": source},
        "serve": served.to_json(),
        "reconciler": liveness.to_json() | {"last_finding": last_finding},
        "broker": broker.to_json(),
        "open_jobs": found.open_jobs,
        "brakes": [
            {"brake_id": b.brake_id, "scope": b.scope, "reason": b.reason} for b in found.brakes
        ],
        "last_reconcile": last_finding,
        "dispatch": _dispatch(found.dispatch),
        "ledger": {"database": ledger.describe(), "last_position": found.last_position},
        "last_verification": verified.to_json() if (verified := found.last_verification) else None,
    }
    if as_json:
        emit_json(body)
    else:
        _print(body, served, liveness, found)
    if not body["api"]["ready"]:
        raise SystemExit(EXIT_NOT_READY)


def _print(body: dict[str, Any], served: Served, liveness: Liveness, found: LedgerStatus) -> None:
    api, broker = body["api"], body["broker"]
    click.echo(
        f"api:        {api['url']} {'ready' if api['ready'] else 'NOT READY'}"
        + (f" ({api['error']})" if api["error"] else "")
        + (f" [from {served.source()}]" if api["source"] == RECORD else "")
    )
    if note := served.note():
        click.echo(f"serve:      {note}")
    if broker["reachable"]:
        names = ", ".join(broker["workers"]) or "none answered"
        click.echo(f"workers:    {len(broker['workers'])} ({names})")
        depth = "unknown" if broker["queue_depth"] is None else str(broker["queue_depth"])
        click.echo(f"queue:      {broker['queue']}: {depth} waiting")
    else:
        click.echo(f"broker:     NOT REACHABLE ({broker['error']})")
    click.echo("open jobs:  " + ", ".join(f"{k} {v}" for k, v in found.open_jobs.items()))
    click.echo(f"brakes:     {len(found.brakes)} active")
    for b in found.brakes:
        click.echo(f"  {b.brake_id}  {b.scope}: {b.reason}")
    dispatch = body["dispatch"]
    oldest = dispatch["oldest_wait_s"]
    click.echo(
        f"dispatch:   {dispatch['unconfirmed']} of {dispatch['waiting']} waiting not confirmed "
        f"by the broker; oldest wait {'-' if oldest is None else f'{oldest:.1f} s'}"
    )
    sent_again = ", ".join(f"{k} {v}" for k, v in dispatch["redispatched"].items()) or "none"
    click.echo(f"re-sent:    {sent_again}")
    last = body["last_reconcile"] or "never"
    click.echo(f"reconciler: {liveness.describe()}; last finding {last}")
    click.echo(f"ledger:     {body['ledger']['database']} (position {found.last_position})")
    click.echo(f"verified:   {_verified(found.last_verification, found.last_position)}")


def _verified(record: VerificationRecord | None, position: int) -> str:
    """The last recorded `audit verify`: its outcome, what it covered and how long ago."""
    if record is None:
        return "never (run outcomes audit verify)"
    outcome = "ok" if record.ok else f"FAILED ({record.problems} problems: {record.first_problem})"
    age = (now() - record.finished_at).total_seconds()
    if not record.covers_range:
        return (
            f"{outcome}; a sample of {record.events} events proved against the tree head "
            f"(not every event), {age:.0f} s ago, by {record.verified_by}"
        )
    behind = position - (record.last_position or 0)
    since = " (the events since a tree head)" if record.scope == SINCE else ""
    return (
        f"{outcome}; up to position {record.last_position or 0}{since} ({behind} events "
        f"since), {age:.0f} s ago, by {record.verified_by}"
    )


def _dispatch(summary: DispatchSummary) -> dict[str, Any]:
    since = summary.oldest_waiting_since
    return {
        "waiting": summary.waiting,
        "unconfirmed": summary.unconfirmed,
        "oldest_wait_s": round((now() - since).total_seconds(), 3) if since else None,
        "redispatched": summary.redispatched,
    }


RECORD = "serve record"


def _api_url(given: str | None, served: Served) -> tuple[str, str]:
    """The URL to ask and where it came from: --api-url or OUTCOMES_API_URL when given, else
    the record of the `outcomes serve` running in this folder, else the default."""
    if given is not None:
        source = click.get_current_context().get_parameter_source("api_url")
        return given, "OUTCOMES_API_URL" if source is ParameterSource.ENVIRONMENT else "--api-url"
    if served.record is not None:
        return served.record.url, RECORD
    return DEFAULT_API_URL, "default"


def _api(url: str, timeout_s: float) -> dict[str, Any]:
    target = url.rstrip("/") + "/readyz"
    try:
        with urllib.request.urlopen(target, timeout=timeout_s) as response:
            return {"url": url, "ready": response.status == 200, "error": None}
    except urllib.error.HTTPError as error:
        return {"url": url, "ready": False, "error": f"HTTP {error.code}"}
    except (OSError, ValueError) as exc:  # refused, timed out, or a malformed URL
        return {"url": url, "ready": False, "error": reason(exc)}

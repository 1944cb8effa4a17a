"""`outcomes webhooks …`: the webhooks registered for accounts' terminal outcomes, and what
was delivered to one, attempt by attempt (registering is the API's: POST /v1/webhooks)."""

from __future__ import annotations

import getpass

import click

from cli.context import with_ledger
from cli.errors import reports_errors
from cli.output import emit_json, json_option
from ledger.clock import format_time
from ledger.runtime.ledger import Ledger
from ledger.services import webhooks
from ledger.webhook_view import WebhookView


@click.group("webhooks")
def webhooks_group() -> None:
    """List webhooks, read their deliveries, remove one."""


def _item(view: WebhookView) -> dict[str, object]:
    return {
        "id": view.webhook_id,
        "account": view.account,
        "url": view.url,
        "status": view.status,
        "created_at": format_time(view.created_at),
        "reason": view.reason,
    }


@webhooks_group.command("list")
@click.option("--account", help="Only this account's webhooks.")
@json_option
@reports_errors
@with_ledger
def list_command(ledger: Ledger, account: str | None, as_json: bool) -> None:
    """List webhooks not removed (never their secrets)."""
    views = webhooks.listed(ledger, account)
    if as_json:
        emit_json({"webhooks": [_item(v) for v in views]})
        return
    for v in views:
        click.echo(f"{v.webhook_id}  {v.account:<12} {v.status:<8} {v.url}")


@webhooks_group.command("deliveries")
@click.argument("webhook_id")
@click.option("--limit", type=click.IntRange(1, webhooks.MAX_DELIVERIES), default=50)
@json_option
@reports_errors
@with_ledger
def deliveries(ledger: Ledger, webhook_id: str, limit: int, as_json: bool) -> None:
    """The webhook's deliveries, the latest outcome first, and every attempt of each."""
    logs = webhooks.deliveries(ledger, webhook_id, None, limit)
    if as_json:
        emit_json(
            {
                "webhook_id": webhook_id,
                "deliveries": [
                    {
                        "event_id": log.delivery.event_id,
                        "job_id": log.delivery.job_id,
                        "state": log.delivery.state,
                        "attempts": [
                            {
                                "attempt": a.attempt,
                                "at": format_time(a.at),
                                "status": a.status,
                                "error": a.error,
                                "duration_ms": a.duration_ms,
                                "relay": a.relay,
                            }
                            for a in log.attempts
                        ],
                    }
                    for log in logs
                ],
            }
        )
        return
    for log in logs:
        d = log.delivery
        click.echo(f"{d.event_id}  job {d.job_id}  {d.state}  {d.attempts} attempt(s)")
        for a in log.attempts:
            said = a.status if a.status is not None else a.error
            click.echo(f"    #{a.attempt} {format_time(a.at)} {said} ({a.duration_ms:.0f} ms)")


@webhooks_group.command("remove")
@click.argument("webhook_id")
@json_option
@reports_errors
@with_ledger
def remove(ledger: Ledger, webhook_id: str, as_json: bool) -> None:
    """Remove a webhook: nothing more is delivered to it."""
    view = webhooks.remove(ledger, webhook_id, None, actor=f"cli:{getpass.getuser()}")
    if as_json:
        emit_json(_item(view))
    else:
        click.echo(f"webhook {view.webhook_id} {view.status}")

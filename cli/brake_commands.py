"""`outcomes brake …`: the operator's emergency brake. Writes the ledger directly, so it works
while the API is down; workers re-check it at the moment of execution."""

from __future__ import annotations

import getpass

import click

from cli.context import with_ledger
from cli.errors import reports_errors
from cli.output import emit_json, json_option
from ledger.runtime.ledger import Ledger
from ledger.services import brakes
from ledger.tools import tool_names

operator_option = click.option(
    "--operator",
    default=lambda: getpass.getuser(),
    show_default="the current user",
    help="Who is acting (recorded in the ledger).",
)


@click.group()
def brake() -> None:
    """Pull, release and inspect emergency brakes (global, per tool, per account)."""


@brake.command("pull")
@click.option(
    "--scope",
    required=True,
    help="global | tool:NAME | account:ID — which jobs the brake holds.",
)
@click.option("--reason", required=True, help="Why (shown to agents whose jobs are held).")
@click.option(
    "--force",
    is_flag=True,
    help="Pull it though the scope names no known tool or account (one that will exist).",
)
@operator_option
@json_option
@reports_errors
@with_ledger
def pull_command(
    ledger: Ledger, scope: str, reason: str, force: bool, operator: str, as_json: bool
) -> None:
    """Pull a brake. When this returns, no job in scope starts; queued jobs end refused
    BRAKE_ENGAGED when a worker reaches them, and new submits are refused."""
    why = None if force else brakes.unknown_scope(ledger, scope, tool_names())
    if why is not None:
        raise click.ClickException(
            f"brake scope {scope.strip()}: {why}; check the name, or pass --force if the "
            "brake is meant for one that will exist"
        )
    view = brakes.pull(ledger, scope, reason, operator)
    if as_json:
        emit_json({"brake_id": view.brake_id})
    else:
        click.echo(f"brake {view.brake_id} pulled ({view.scope}): {view.reason}")


@brake.command("release")
@click.argument("brake_id")
@click.option("--reason", required=True, help="Why it is safe to run again.")
@operator_option
@json_option
@reports_errors
@with_ledger
def release_command(
    ledger: Ledger, brake_id: str, reason: str, operator: str, as_json: bool
) -> None:
    """Release brake BRAKE_ID. Jobs it refused stay refused; new jobs run again."""
    view = brakes.release(ledger, brake_id, reason, operator)
    if as_json:
        emit_json({"brake_id": view.brake_id, "released": True})
    else:
        click.echo(f"brake {view.brake_id} released ({view.scope})")


@brake.command("status")
@json_option
@reports_errors
@with_ledger
def status_command(ledger: Ledger, as_json: bool) -> None:
    """List active brakes: scope, who pulled them, when, why, and how many jobs each holds."""
    items = [hold.to_json() for hold in brakes.holds(ledger)]
    if as_json:
        emit_json({"brakes": items})
        return
    if not items:
        click.echo("no active brakes")
    for b in items:
        click.echo(
            f"{b['brake_id']}  {b['scope']:<24} pulled {b['pulled_at']} by {b['operator']}"
            f"  queued_jobs={b['queued_jobs']}  reason: {b['reason']}"
        )

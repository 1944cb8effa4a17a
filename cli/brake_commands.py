"""`outcomes brake …`: the operator's emergency brake. Writes the ledger directly, so it works
while the API is down; workers re-check it at the moment of execution."""

from __future__ import annotations

import getpass

import click

from cli.errors import reports_errors
from cli.output import emit_json, json_option
from ledger.chain import format_time
from ledger.persistence.brakes import brake_listing, pull, release
from ledger.persistence.open import open_store

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
@operator_option
@json_option
@reports_errors
def pull_command(scope: str, reason: str, operator: str, as_json: bool) -> None:
    """Pull a brake. When this returns, no job in scope starts; queued jobs end refused
    BRAKE_ENGAGED when a worker reaches them, and new submits are refused."""
    store = open_store()
    view = pull(store, scope, reason, operator)
    store.engine.dispose()
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
def release_command(brake_id: str, reason: str, operator: str, as_json: bool) -> None:
    """Release brake BRAKE_ID. Jobs it refused stay refused; new jobs run again."""
    store = open_store()
    view = release(store, brake_id, reason, operator)
    store.engine.dispose()
    if as_json:
        emit_json({"brake_id": view.brake_id, "released": True})
    else:
        click.echo(f"brake {view.brake_id} released ({view.scope})")


@brake.command("status")
@json_option
@reports_errors
def status_command(as_json: bool) -> None:
    """List active brakes: scope, who pulled them, when, why, and how many jobs each holds."""
    store = open_store()
    with store.reading() as conn:
        brakes = brake_listing(conn)
    store.engine.dispose()
    for b in brakes:
        b["pulled_at"] = format_time(b["pulled_at"])
    if as_json:
        emit_json({"brakes": brakes})
        return
    if not brakes:
        click.echo("no active brakes")
    for b in brakes:
        click.echo(
            f"{b['brake_id']}  {b['scope']:<24} pulled {b['pulled_at']} by {b['operator']}"
            f"  queued_jobs={b['queued_jobs']}  reason: {b['reason']}"
        )

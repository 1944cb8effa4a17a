"""`outcomes turns show ID --account A`: what a whole turn of an agent's calls did, at the
database (docs/turns.md), as `GET /v1/turns/{id}` answers it."""

from __future__ import annotations

import click

from cli.context import with_ledger
from cli.errors import fail, reports_errors
from cli.output import emit_json, json_option
from ledger.errors import InvalidEventError, TurnNotFoundError
from ledger.runtime.ledger import Ledger
from ledger.services import turns as turn_service


@click.group()
def turns() -> None:
    """Turns: the calls an agent made under one Outcomes-Turn, told whole."""


@turns.command("show")
@click.argument("turn_id")
@click.option("--account", required=True, help="Whose turn (turn ids are the account's own).")
@json_option
@reports_errors
@with_ledger
def show(ledger: Ledger, turn_id: str, account: str, as_json: bool) -> None:
    """Each call, the counts, what already happened, the first failure and one sentence
    (with --json, exactly GET /v1/turns/{id}'s body)."""
    try:
        found = turn_service.report(ledger, account, turn_id)
    except (TurnNotFoundError, InvalidEventError):
        fail(f"no call of account {account} names the turn {turn_id!r}")
        return
    if as_json:
        emit_json(found.model_dump(mode="json"))
        return
    click.echo(found.summary)
    for call in found.calls:
        code = f" {call.code.value}" if call.code else ""
        action = call.next_action.value
        click.echo(f"  {call.job_id}  {call.tool}  {call.status.value}{code}  {action}")
    click.echo(f"complete: {found.complete}  all_succeeded: {found.all_succeeded}")
    if found.already_happened:
        click.echo(f"already happened: {', '.join(found.already_happened)}")
    if found.halt is not None:
        state = "holds" if found.halt.active else "released"
        click.echo(f"halt: brake {found.halt.brake_id} ({found.halt.scope}) {state}")

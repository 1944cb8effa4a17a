"""`outcomes migrate` and `outcomes rebuild`: the ledger's schema and read models."""

from __future__ import annotations

import click

from cli.context import with_ledger
from cli.errors import reports_errors
from cli.output import emit_json, json_option
from ledger.services import admin
from ledger.services.ledger import Ledger


@click.command()
@json_option
@reports_errors
@with_ledger
def migrate(ledger: Ledger, as_json: bool) -> None:
    """Create or upgrade the ledger's tables in OUTCOMES_DATABASE_URL (idempotent).

    On Postgres this also installs the triggers that make the events table refuse UPDATE,
    DELETE and TRUNCATE.
    """
    before, after = admin.migrate(ledger)
    if as_json:
        emit_json({"from": before, "to": after, "database": ledger.describe()})
    elif before == after:
        click.echo(f"ledger schema is up to date (revision {after})")
    else:
        click.echo(f"ledger schema migrated from {before or 'empty'} to {after}")


@click.command()
@json_option
@reports_errors
@with_ledger
def rebuild(ledger: Ledger, as_json: bool) -> None:
    """Rebuild every read model (jobs, brakes, tokens) from the events alone.

    Runs in one transaction; appends wait until it commits.
    """
    count = admin.rebuild(ledger)
    if as_json:
        emit_json({"events_replayed": count})
    else:
        click.echo(f"read models rebuilt from {count} events")

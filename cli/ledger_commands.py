"""`outcomes migrate` and `outcomes rebuild`: the ledger's schema and read models."""

from __future__ import annotations

import click

from cli.errors import reports_errors
from cli.output import emit_json, json_option
from ledger.persistence import migrate as migrations
from ledger.persistence.open import open_store
from ledger.persistence.projections import rebuild_read_models


@click.command()
@json_option
@reports_errors
def migrate(as_json: bool) -> None:
    """Create or upgrade the ledger's tables in OUTCOMES_DATABASE_URL (idempotent).

    On Postgres this also installs the triggers that make the events table refuse UPDATE,
    DELETE and TRUNCATE.
    """
    store = open_store()
    before = migrations.current_revision(store.engine)
    migrations.upgrade(store.engine)
    after = migrations.current_revision(store.engine)
    store.engine.dispose()
    if as_json:
        emit_json({"from": before, "to": after, "database": store.engine.url.render_as_string()})
    elif before == after:
        click.echo(f"ledger schema is up to date (revision {after})")
    else:
        click.echo(f"ledger schema migrated from {before or 'empty'} to {after}")


@click.command()
@json_option
@reports_errors
def rebuild(as_json: bool) -> None:
    """Rebuild every read model (jobs, brakes, tokens) from the events alone.

    Runs in one transaction; appends wait until it commits.
    """
    store = open_store()
    count = rebuild_read_models(store)
    store.engine.dispose()
    if as_json:
        emit_json({"events_replayed": count})
    else:
        click.echo(f"read models rebuilt from {count} events")

"""`outcomes migrate` and `outcomes rebuild`: the ledger's schema, roles and read models."""

from __future__ import annotations

import os
import sys

import click

from cli.context import with_ledger
from cli.errors import reports_errors
from cli.output import emit_json, json_option
from ledger.services import admin, audit
from ledger.services.ledger import Ledger


@click.command()
@click.option(
    "--app-role",
    metavar="NAME",
    envvar="OUTCOMES_APP_ROLE",
    show_envvar=True,
    help="PostgreSQL: also create this login role if missing and grant it what the API, "
    "workers and reconciler need (read and append events, write the read models), and no "
    "more. Applied again on every run.",
)
@click.option(
    "--app-password-env",
    metavar="VAR",
    help="Set the application role's password from this environment variable (otherwise "
    "passwords are left to the operator).",
)
@click.option(
    "--print-grants",
    is_flag=True,
    help="Print the SQL that creates the application role and grants its privileges, and "
    "change nothing.",
)
@json_option
@reports_errors
@with_ledger
def migrate(
    ledger: Ledger,
    app_role: str | None,
    app_password_env: str | None,
    print_grants: bool,
    as_json: bool,
) -> None:
    """Create or upgrade the ledger's tables in OUTCOMES_DATABASE_URL (idempotent).

    On Postgres this also installs the triggers that make the events table refuse UPDATE,
    DELETE and TRUNCATE. Run it as the role that owns the tables, and connect everything else
    as the --app-role: the owner (and any superuser) can switch those triggers off.
    """
    if print_grants:
        if app_role is None:
            raise click.UsageError("--print-grants needs --app-role NAME")
        click.echo(admin.grant_script(ledger, app_role), nl=False)
        return
    password = _password(app_password_env, app_role)
    before, after = admin.migrate(ledger, app_role, password)
    if as_json:
        emit_json(
            {"from": before, "to": after, "database": ledger.describe(), "app_role": app_role}
        )
        return
    if before == after:
        click.echo(f"ledger schema is up to date (revision {after})")
    else:
        click.echo(f"ledger schema migrated from {before or 'empty'} to {after}")
    if app_role is not None:
        click.echo(f"application role {app_role!r} granted its privileges")


def _password(variable: str | None, app_role: str | None) -> str | None:
    if variable is None:
        return None
    if app_role is None:
        raise click.UsageError("--app-password-env needs --app-role NAME")
    password = os.environ.get(variable)
    if not password:
        raise click.UsageError(f"--app-password-env: the environment variable {variable} is empty")
    return password


@click.command()
@json_option
@reports_errors
@with_ledger
def rebuild(ledger: Ledger, as_json: bool) -> None:
    """Rebuild every read model (jobs, brakes, tokens) from the events alone.

    Runs in one transaction; appends wait until it commits. A progress bar goes to stderr.
    """
    total = audit.size(ledger)  # the last position: an upper bound on the events
    with click.progressbar(length=total, label="rebuilding", file=sys.stderr) as bar:
        count = admin.rebuild(ledger, progress=bar.update)
    if as_json:
        emit_json({"events_replayed": count})
    else:
        click.echo(f"read models rebuilt from {count} events")

"""`outcomes migrate` and `outcomes rebuild`: the ledger's schema, roles and read models."""

from __future__ import annotations

import os
import sys

import click

from cli.context import with_ledger
from cli.errors import EXIT_PROBLEM, fail, reports_errors
from cli.output import emit_json, json_option
from ledger.runtime.ledger import Ledger
from ledger.services import admin, audit
from ledger.services import rebuild as rebuild_service


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
@click.option(
    "--restart",
    is_flag=True,
    help="Begin again from the first stream, even if a rebuild stopped part way (by default "
    "it resumes after the last page it committed).",
)
@click.option(
    "--page",
    type=click.IntRange(1, 10_000),
    default=rebuild_service.PAGE,
    show_default=True,
    help="Streams a page: each page is one transaction holding its streams' locks, so a "
    "smaller page makes a write to one of them wait less, and the rebuild take longer.",
)
@json_option
@reports_errors
@with_ledger
def rebuild(ledger: Ledger, restart: bool, page: int, as_json: bool) -> None:
    """Rebuild every read model (jobs, brakes, tokens, webhooks) from the events alone.

    Online: a page of streams at a time, each page under those streams' own locks for one
    short transaction, so agents keep submitting and polling (a write to a stream of the page
    waits for that page alone). Only rows that differ are written, in place. Stopped anywhere,
    it resumes where it stopped (--restart: from the first stream). A progress bar goes to
    stderr. Exits 2 when some stream's events do not fold (its row is left as it is).
    """
    total = audit.size(ledger)  # the last position: an upper bound on the events
    with click.progressbar(length=total, label="rebuilding", file=sys.stderr) as bar:
        found = admin.rebuild(ledger, progress=bar.update, restart=restart, page=page)
    if as_json:
        emit_json(found.to_json())
    else:
        resumed = f" (resumed after {found.resumed_after})" if found.resumed_after else ""
        click.echo(
            f"read models rebuilt from {found.events_replayed} events{resumed}: "
            f"{found.inserted} rows inserted, {found.updated} updated, {found.deleted} deleted"
        )
    if not found.ok:
        shown = "; ".join(found.unfoldable[:3])
        fail(f"{found.unfoldable_total} read-model rows left as they were: {shown}", EXIT_PROBLEM)

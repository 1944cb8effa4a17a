"""`outcomes secrets …`: the keys that seal declared secret arguments (docs/secrets.md)."""

from __future__ import annotations

import sys

import click

from cli.context import with_ledger
from cli.errors import reports_errors
from cli.output import emit_json, json_option
from ledger.keyring import new_key_line
from ledger.runtime.ledger import Ledger
from ledger.services import secrets as secret_service


@click.group()
def secrets() -> None:
    """Keys for declared secret arguments: make one, list the loaded ones, check a value."""


@secrets.command("new-key")
@click.option("--id", "kid", help="The key's id (default: k and 6 random hex digits).")
@json_option
@reports_errors
def new_key(kid: str | None, as_json: bool) -> None:
    """Print a new key as `id:key`: put it first in OUTCOMES_SECRETS_KEY (or the key file) to
    seal with it, keep the older ones after it to open what they sealed."""
    line = new_key_line(kid)
    if as_json:
        emit_json({"id": line.partition(":")[0], "key": line})
        return
    click.echo(line)


@secrets.command("keys")
@json_option
@reports_errors
@with_ledger
def keys(ledger: Ledger, as_json: bool) -> None:
    """The key ids this process loads (never the keys), the one that seals first."""
    kids = secret_service.key_ids(ledger)
    if as_json:
        emit_json({"keys": list(kids), "seals_with": kids[0] if kids else None})
        return
    if not kids:
        click.echo("no secrets key: set OUTCOMES_SECRETS_KEY or OUTCOMES_SECRETS_KEY_FILE")
        return
    for index, kid in enumerate(kids):
        click.echo(f"{kid}  {'seals and opens' if index == 0 else 'opens'}")


@secrets.command("check")
@click.argument("job_id")
@click.argument("path")
@json_option
@reports_errors
@with_ledger
def check(ledger: Ledger, job_id: str, path: str, as_json: bool) -> None:
    """Whether the value on stdin is the secret at PATH (a JSON pointer such as /password) of
    the job's arguments; exits 1 when it is not. The value is never printed."""
    candidate = sys.stdin.read().removesuffix("\n")
    found = secret_service.check(ledger, job_id, path, candidate)
    if as_json:
        emit_json(
            {"job_id": found.job_id, "path": found.path, "kid": found.kid, "matches": found.matches}
        )
    else:
        verdict = "matches" if found.matches else "does not match"
        click.echo(f"the value {verdict} {found.path} of job {found.job_id} (key {found.kid})")
    if not found.matches:
        raise SystemExit(1)

"""`outcomes tokens …`: API tokens, scoped to an account and a role, stored hashed."""

from __future__ import annotations

import getpass

import click

from cli.context import with_ledger
from cli.errors import reports_errors
from cli.home_records import load_served_tools
from cli.output import emit_json, json_option
from ledger.access import ROLES
from ledger.runtime.ledger import Ledger
from ledger.services import tokens as token_service
from ledger.settings import load_settings
from ledger.token_view import TokenView


@click.group()
def tokens() -> None:
    """Create, list and revoke API tokens."""


@tokens.command("create")
@click.option(
    "--account", required=True, help="Account the token acts for ('*' = all; not for agents)."
)
@click.option("--role", required=True, type=click.Choice(ROLES), help="What the token may do.")
@click.option("--tools", help="Comma-separated tools the token may call (default: all).")
@click.option(
    "--allow-unknown-tools",
    is_flag=True,
    help="Accept --tools names not loaded here (from OUTCOMES_TOOLS, else from the tools of the "
    "`outcomes serve` running in this folder).",
)
@json_option
@reports_errors
@with_ledger
def create(
    ledger: Ledger,
    account: str,
    role: str,
    tools: str | None,
    allow_unknown_tools: bool,
    as_json: bool,
) -> None:
    """Create a token and print it once: only its hash is stored."""
    # The registry the tool names are checked against (OUTCOMES_TOOLS, else this folder's serve).
    load_served_tools(load_settings().tools)
    issued = token_service.create(
        ledger,
        account,
        role,
        tools.split(",") if tools is not None else None,
        actor=f"cli:{getpass.getuser()}",
        allow_unknown_tools=allow_unknown_tools,
    )
    if as_json:
        emit_json({"id": issued.view.token_id, "token": issued.token})
    else:
        click.echo(f"token {issued.view.token_id} ({role} for {account}); shown once:")
        click.echo(issued.token)


def _item(view: TokenView) -> dict[str, object]:
    return {
        "id": view.token_id,
        "account": view.account,
        "role": view.role,
        "tools": view.tools,
        "revoked": view.revoked,
    }


@tokens.command("list")
@json_option
@reports_errors
@with_ledger
def list_command(ledger: Ledger, as_json: bool) -> None:
    """List tokens (never their values)."""
    views = token_service.list_all(ledger)
    if as_json:
        emit_json({"tokens": [_item(v) for v in views]})
        return
    for v in views:
        state = "revoked" if v.revoked else "active"
        tools = ",".join(v.tools) if v.tools else "all tools"
        click.echo(f"{v.token_id}  {v.account:<12} {v.role:<8} {state:<7} {tools}")


@tokens.command("revoke")
@click.argument("token_id")
@json_option
@reports_errors
@with_ledger
def revoke(ledger: Ledger, token_id: str, as_json: bool) -> None:
    """Revoke a token: it is refused (401) from the next request on."""
    view = token_service.revoke(ledger, token_id, actor=f"cli:{getpass.getuser()}")
    if as_json:
        emit_json(_item(view))
    else:
        click.echo(f"token {view.token_id} revoked")

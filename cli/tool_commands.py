"""`outcomes tools list`: every tool this deployment loads (OUTCOMES_TOOLS, else those of the
`outcomes serve` running in this folder), enabled or not."""

from __future__ import annotations

import click

from cli.errors import reports_errors
from cli.home_records import load_served_tools
from cli.output import emit_json, json_option
from ledger.services import catalog
from ledger.settings import load_settings


@click.group()
def tools() -> None:
    """The tools agents may be granted."""


@tools.command("list")
@json_option
@reports_errors
def list_command(as_json: bool) -> None:
    """List every loaded tool with its limits (enabled or not).

    The tools come from the modules in OUTCOMES_TOOLS; when it is not set, from those the
    `outcomes serve` running in this folder loaded (its .outcomes/serve.json)."""
    loaded = load_served_tools(load_settings().tools)
    entries = catalog.every_tool()
    if as_json:
        emit_json({"tools": [e.as_json() for e in entries], "tool_modules": loaded.to_json()})
        return
    for said in (loaded.source(), loaded.note):
        if said:
            click.echo(f"outcomes: {said}", err=True)
    for entry in entries:
        quota = f" quota {entry.quota.limit}/{entry.quota.window_s}s" if entry.quota else ""
        state = "enabled" if entry.enabled else "disabled"
        spends = " spends" if entry.spends else ""
        spends += f" approval:{entry.approval}" if entry.approval else ""
        summary = entry.description.splitlines()[0] if entry.description else ""
        click.echo(f"{entry.name}  {state}{spends}{quota}  {summary}".rstrip())
    if not entries:
        click.echo("no tools loaded (set OUTCOMES_TOOLS)")

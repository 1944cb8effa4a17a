"""`outcomes tools list`: every tool this deployment loads (OUTCOMES_TOOLS), enabled or not."""

from __future__ import annotations

import click

from cli.errors import reports_errors
from cli.output import emit_json, json_option
from ledger.services import catalog
from ledger.settings import load_settings
from ledger.tools import load_tool_modules


@click.group()
def tools() -> None:
    """The tools agents may be granted."""


@tools.command("list")
@json_option
@reports_errors
def list_command(as_json: bool) -> None:
    """List every loaded tool with its limits (enabled or not)."""
    load_tool_modules(load_settings().tools)
    entries = catalog.every_tool()
    if as_json:
        emit_json({"tools": [entry.as_json() for entry in entries]})
        return
    for entry in entries:
        quota = f" quota {entry.quota.limit}/{entry.quota.window_s}s" if entry.quota else ""
        state = "enabled" if entry.enabled else "disabled"
        spends = " spends" if entry.spends else ""
        summary = entry.description.splitlines()[0] if entry.description else ""
        click.echo(f"{entry.name}  {state}{spends}{quota}  {summary}".rstrip())
    if not entries:
        click.echo("no tools loaded (set OUTCOMES_TOOLS)")

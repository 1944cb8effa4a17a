"""`outcomes tools list`: every tool this deployment loads (OUTCOMES_TOOLS, else those of the
`outcomes serve` running in this folder), enabled or not; `outcomes tools new NAME`: a working
tool module and its test to start from (`cli.tool_scaffold`)."""

from __future__ import annotations

import os
from pathlib import Path

import click

from cli.errors import reports_errors
from cli.home_records import load_served_tools
from cli.output import emit_json, json_option
from cli.tool_scaffold import scaffold_for, write_scaffold
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


@tools.command("new")
@click.argument("name")
@click.option(
    "--dir",
    "folder",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path("."),
    show_default=True,
    help="The folder to write the module and its test into.",
)
@json_option
@reports_errors
def new_command(name: str, folder: Path, as_json: bool) -> None:
    """Write a working tool NAME (e.g. billing.refund) and its pytest test to start from.

    The module is NAME with underscores for dots (billing_refund.py), loaded by
    OUTCOMES_TOOLS=billing_refund with its folder on PYTHONPATH. Existing files are never
    overwritten."""
    scaffold = scaffold_for(name)
    written = write_scaffold(scaffold, folder)
    where = os.path.relpath(folder)
    steps = [] if where == "." else [(f"cd {where}", "")]
    steps += [
        (f"python -m pytest {scaffold.test_file}", "its tests"),
        (f"export PYTHONPATH=. OUTCOMES_TOOLS={scaffold.module}", "find the module, load it"),
        ("outcomes tools list", f"{scaffold.tool} is loaded"),
        ("outcomes serve", "agents can call it"),
    ]
    if as_json:
        emit_json(
            {
                "tool": scaffold.tool,
                "module": scaffold.module,
                "written": [str(path) for path in written],
                "next": [command for command, _ in steps],
            }
        )
        return
    for path in written:
        click.echo(f"wrote {path}")
    width = max(len(command) for command, _ in steps)
    click.echo("\nNext, from this folder:")
    for command, why in steps:
        click.echo(f"  {command:<{width}}  # {why}" if why else f"  {command}")

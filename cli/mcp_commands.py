"""`outcomes mcp`: the MCP server over stdio, for a desktop MCP client that starts it."""

from __future__ import annotations

import os
from pathlib import Path

import click

from cli.context import ledger_of
from cli.errors import fail, reports_errors
from cli.home_records import TOOLS_ENV, load_served_tools
from ledger.errors import NotAuthenticatedError
from ledger.settings import DEFAULT_HOME, load_settings
from ledger.tools import tool_names

TOKEN_ENV = "OUTCOMES_TOKEN"


@click.command()
@click.option(
    "--token-file",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help=f"Read the token from this file instead of {TOKEN_ENV}.",
)
@click.option(
    "--home",
    type=click.Path(exists=True, file_okay=False, path_type=Path),
    help="Run in this folder: the one `outcomes serve` runs in, on embedded defaults (its "
    "ledger and broker are under ./.outcomes/ there). The .outcomes folder itself (the path "
    "serve prints) means the folder it is in.",
)
@reports_errors
def mcp(token_file: Path | None, home: Path | None) -> None:
    """Serve the tools this token may call as MCP tools, over stdin/stdout.

    The token (an agent token: `outcomes tokens create --role agent`) comes from OUTCOMES_TOKEN
    or --token-file. Each tool call submits a job, as POST /v1/jobs does, and waits for its
    outcome; dotted tool names become `__` (tracker.read_issue → tracker__read_issue).

    The tools are those of OUTCOMES_TOOLS when it is set, else those of the `outcomes serve`
    running in the folder (its serve.json), as `outcomes tools list` finds them; with none, a
    warning on stderr says so.
    """
    from mcp_server.stdio import check_token, serve_stdio  # the CLI starts the adapter
    from workers.dispatch import dispatcher_from_settings

    token = (token_file.read_text() if token_file else os.environ.get(TOKEN_ENV, "")).strip()
    if home is not None:
        os.chdir(_folder_of(home))  # before the settings are read: embedded paths are relative
    if not token:
        fail(f"no token: set {TOKEN_ENV} or pass --token-file (outcomes tokens create)")
    settings = load_settings()
    found = load_served_tools(settings.tools)
    if note := found.note:
        click.echo(f"outcomes: {note}", err=True)
    if not tool_names():
        click.echo(
            f"outcomes: WARNING: no tools loaded: agents will be offered none. Set {TOOLS_ENV}"
            "=module,… or run this where `outcomes serve` runs (--home FOLDER)",
            err=True,
        )
    elif source := found.source():
        click.echo(f"outcomes: {source}", err=True)
    ledger = ledger_of(click.get_current_context(), settings.database_url)
    try:
        check_token(ledger, token)
    except NotAuthenticatedError:
        fail(f"the token in {'--token-file' if token_file else TOKEN_ENV} is not a valid token")
    serve_stdio(ledger, dispatcher_from_settings(), token)


def _folder_of(home: Path) -> Path:
    """The folder to run in: `home`, or the folder holding it when `home` is the home folder
    itself (`<clone>/.outcomes`, as `outcomes serve` prints it); never a ledger nested in it."""
    resolved = home.resolve()
    if resolved.name == DEFAULT_HOME.name and not (resolved / DEFAULT_HOME).exists():
        return resolved.parent
    return resolved

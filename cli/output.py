"""Output for people (plain lines) and for programs (`--json`)."""

from __future__ import annotations

from typing import Any

import click
import orjson


def emit_json(value: Any) -> None:
    click.echo(orjson.dumps(value, option=orjson.OPT_SORT_KEYS).decode())


json_option = click.option(
    "--json", "as_json", is_flag=True, help="Print machine-readable JSON instead of text."
)

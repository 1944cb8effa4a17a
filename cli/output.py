"""Output for people (plain lines) and for programs (`--json`)."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

import click
import orjson

PRIVATE_FILE = 0o600  # what the ledger's events hold (job arguments) is the owner's alone


def emit_json(value: Any) -> None:
    click.echo(orjson.dumps(value, option=orjson.OPT_SORT_KEYS).decode())


json_option = click.option(
    "--json", "as_json", is_flag=True, help="Print machine-readable JSON instead of text."
)


@contextmanager
def text_out(path: Path | None) -> Iterator[IO[str]]:
    """stdout, or `path` written as a private file: created 0600 (never readable by others,
    not even for a moment), and an existing file narrowed to 0600 before anything is written."""
    if path is None:
        yield sys.stdout
        return
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, PRIVATE_FILE)
    try:
        os.fchmod(fd, PRIVATE_FILE)
    except BaseException:
        os.close(fd)
        raise
    with open(fd, "w", encoding="utf-8") as out:
        yield out

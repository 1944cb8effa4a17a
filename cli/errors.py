"""One-line errors and exit codes for every command."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, NoReturn, TypeVar

import click

from ledger.errors import LedgerError

F = TypeVar("F", bound=Callable[..., Any])

EXIT_ERROR = 1
EXIT_PROBLEM = 2  # the command worked and found something wrong (e.g. a broken chain)
EXIT_USAGE = 2  # options that do not go together or bad values (as click's own usage errors)


def fail(message: str, code: int = EXIT_ERROR) -> NoReturn:
    click.echo(f"outcomes: {message}", err=True)
    raise SystemExit(code)


def reports_errors(func: F) -> F:
    """Turn the ledger's typed errors into a one-line reason and a non-zero exit."""

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return func(*args, **kwargs)
        except LedgerError as exc:
            fail(f"{type(exc).__name__}: {exc}")
        except OSError as exc:
            fail(f"{exc.strerror or exc}: {exc.filename or ''}".rstrip(": "))

    return wrapper  # type: ignore[return-value]

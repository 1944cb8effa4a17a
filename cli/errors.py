"""One-line errors and exit codes for every command. A line says why in words: the error's own
message, never the name of a Python class (`ValueError: …`)."""

from __future__ import annotations

import functools
import urllib.error
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


def reason(exc: BaseException) -> str:
    """Why `exc` happened, in words: its message (for a system error its description and the
    file it names), or the first line of what its kind means when it has no message; never its
    class name."""
    if isinstance(exc, urllib.error.URLError) and not isinstance(exc, urllib.error.HTTPError):
        inner = exc.reason
        return reason(inner) if isinstance(inner, BaseException) else str(inner)
    if isinstance(exc, OSError) and exc.strerror:
        return f"{exc.strerror}: {exc.filename or ''}".rstrip(": ")
    text = str(exc).strip()
    if isinstance(exc, KeyError) and len(exc.args) == 1:
        text = f"{exc.args[0]!s} is missing"
    if text:
        return text.splitlines()[0]
    meaning = (type(exc).__doc__ or "").strip().splitlines()
    return meaning[0].rstrip(".").lower() if meaning else "failed, with no reason given"


def reports_errors(func: F) -> F:
    """Turn the ledger's typed errors into a one-line reason and a non-zero exit."""

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return func(*args, **kwargs)
        except (LedgerError, OSError) as exc:
            fail(reason(exc))

    return wrapper  # type: ignore[return-value]
